# scidmz — the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: sysdeps demo test lint docs docs-screenshot unit image crds chart-docs protos dashboards testenv bench-operator bench-testenv bench-netsim bench-collector bench-control bench-chaos clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==26.3
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Build (first time ~10 min) or reuse the cached kube-apiserver, etcd, kcm, scheduler, kwok.
testenv:
	hack/testenv/build.sh

# System tools (Prometheus, iproute2, iperf3, ...): installed from apt when root, else named.
sysdeps:
	hack/system-deps.sh

## The main job: the image on a real local node, the chart installed with helm,
## examples/*.yaml, the loop in pods, live, and a report. DEMO_MODE=host runs the loop as
## local processes instead (machines without containerd or root).
DEMO_MODE ?= cluster
demo: $(STAMP) testenv sysdeps
	$(BIN)/scidmz demo --mode $(DEMO_MODE)

## Every test: static gates, the docs site (strict), then unit and control-plane tests.
test: $(STAMP) testenv sysdeps lint docs
	$(BIN)/pytest

## The docs site into build/site: a broken link or anchor, or a page not in the nav, fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

## docs/images/landing.png: the built site's landing page in headless Chromium.
docs-screenshot: docs sysdeps
	$(BIN)/python -m scidmz.testenv.browser build/site docs/images/landing.png

lint: $(STAMP)
	$(BIN)/ruff check operator tests bench hack
	$(BIN)/ruff format --check operator tests bench hack
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest tests/unit

## The image without a Docker daemon: buildah on a debootstrap'ed base (root; as the tests do).
image: $(STAMP) sysdeps
	$(BIN)/python -m scidmz.testenv.image

## Regenerate the gRPC/protobuf modules of operator/scidmz/proto/*.proto (checked in).
protos: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I operator --python_out=operator --grpc_python_out=operator \
		--plugin=protoc-gen-mypy=$(BIN)/protoc-gen-mypy --mypy_out=operator \
		--plugin=protoc-gen-mypy_grpc=$(BIN)/protoc-gen-mypy_grpc --mypy_grpc_out=operator \
		operator/scidmz/proto/telemetry.proto

## Regenerate dashboards/*.json and the chart's copies of the dashboards, alerts and CRDs.
dashboards: $(STAMP)
	$(BIN)/scidmz dashboards --out dashboards
	mkdir -p charts/scidmz/files/dashboards
	cp dashboards/*.json charts/scidmz/files/dashboards/
	cp dashboards/alerts.yaml charts/scidmz/files/alerts.yaml
	cp crds/*.yaml charts/scidmz/crds/

crds: $(STAMP)
	$(BIN)/scidmz crd --out-dir crds --admission-policy charts/scidmz/templates/admission-policy.yaml
	cp crds/*.yaml charts/scidmz/crds/

## Regenerate the values table of charts/scidmz/README.md from values.yaml's comments.
chart-docs: $(STAMP)
	$(BIN)/python hack/chart_readme.py

bench-operator: $(STAMP) testenv
	$(BIN)/python bench/operator_scale.py

bench-testenv: $(STAMP) testenv
	$(BIN)/python bench/testenv_startup.py

bench-netsim: $(STAMP)
	$(BIN)/python bench/netsim_speed.py --hours 8 --write

bench-collector: $(STAMP)
	$(BIN)/python bench/collector_scale.py --samples 8 --write

bench-control: $(STAMP)
	$(BIN)/python bench/control_latency.py --write
	$(BIN)/python bench/control_quality.py

bench-chaos: $(STAMP) testenv
	$(BIN)/python bench/chaos.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

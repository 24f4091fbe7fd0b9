# One image for every scidmz entry point: operator, collector, controller, target, sim, train.
# Stage 1 builds the wheel, stage 2 the software tap's capture program (tapreader.c); the
# last installs only the wheel, that program, the models and the P4 programs, and runs as a
# non-root user. BASE_IMAGE: any Debian-based image with Python 3.11 and pip on
# PATH (the tests build one with debootstrap where the official image cannot be pulled).
ARG BASE_IMAGE=python:3.11.14-slim-bookworm
FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install --no-cache-dir pip==26.3 \
    && pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# Named <program>-<first 12 hex of the source's sha256>, as scidmz.lab.native looks it up.
FROM ${BASE_IMAGE} AS native
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY operator/scidmz/lab/tapreader.c /src/tapreader.c
# Unpinned: a build-stage compiler only (one binary leaves this stage), and Debian retires
# a pinned libc6-dev from the mirror with each security update. One step: fewer layers.
# hadolint ignore=DL3008
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir /native \
    && gcc -O2 -Wall -Wextra -Werror \
        -o "/native/tapreader-$(sha256sum /src/tapreader.c | cut -c1-12)" /src/tapreader.c

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="scidmz" \
      org.opencontainers.image.description="Science DMZ rate control: operator, P4 telemetry collector, MLC controller" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin scidmz
COPY --from=build /dist/ /tmp/dist/
RUN pip install --no-cache-dir "$(ls /tmp/dist/scidmz-*.whl)" \
    && rm -rf /tmp/dist
COPY models /usr/share/scidmz/models
COPY p4 /usr/share/scidmz/p4
COPY --from=native /native/ /usr/lib/scidmz/native/
ENV SCIDMZ_MODELS_DIR=/usr/share/scidmz/models \
    SCIDMZ_NATIVE_DIR=/usr/lib/scidmz/native \
    SCIDMZ_NUMBA_CACHE=/tmp/scidmz-numba \
    PYTHONUNBUFFERED=1
USER 10001:10001
ENTRYPOINT ["scidmz"]
CMD ["--help"]

"""Local control plane bring-up time with a warm build cache (target: < 10 s).

Measures start_control_plane() — certificates, etcd, kube-apiserver to /readyz, CRDs
established, controller-manager, scheduler, kwok and a fake node — and then the time until a
one-replica Deployment is available (kwok playing the kubelet).

    .venv/bin/python bench/testenv_startup.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import yaml

from scidmz.testenv.cluster import ensure_toolchain, start_control_plane

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "testenv_startup.md"

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "probe", "namespace": "default"},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "probe"}},
        "template": {
            "metadata": {"labels": {"app": "probe"}},
            "spec": {"containers": [{"name": "c", "image": "probe:1"}]},
        },
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    tools = ensure_toolchain(log=lambda _: None)
    up, pods = [], []
    for i in range(args.runs):
        started = time.monotonic()
        plane = start_control_plane(toolchain=tools, crds=(REPO / "crds",), log=lambda _: None)
        up.append(time.monotonic() - started)
        try:
            plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(DEPLOYMENT))
            plane.kubectl("wait", "--for=condition=Available", "deployment/probe", "--timeout=30s")
            pods.append(time.monotonic() - started)
        finally:
            plane.stop()
        print(
            f"run {i + 1}: control plane up {up[-1]:.2f}s, Deployment available "
            f"{pods[-1]:.2f}s after start",
            flush=True,
        )
    table = "\n".join(
        [
            "| measure | median (s) | max (s) |",
            "|---|---:|---:|",
            f"| bring-up (ready, CRDs established, kwok node) | {statistics.median(up):.2f} | "
            f"{max(up):.2f} |",
            f"| ... plus first Deployment available | {statistics.median(pods):.2f} | "
            f"{max(pods):.2f} |",
        ]
    )
    verdict = f"Target (warm bring-up < 10 s): {'MET' if max(up) < 10 else 'MISSED'}"
    print(table + "\n" + verdict)
    if not args.no_write:
        RESULTS.write_text(
            f"# Local control plane bring-up (bench/testenv_startup.py, {args.runs} runs)\n\n"
            "Warm build cache, 2-core machine.\n\n" + table + "\n\n" + verdict + "\n"
        )


if __name__ == "__main__":
    main()

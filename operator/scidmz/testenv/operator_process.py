"""``scidmz operator`` as a child process against a local control plane, healthy on return.
Used by the demo, the benchmarks and the control-plane tests."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from scidmz.testenv.cluster import ControlPlane, free_port, wait_http_ok


@dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    health_port: int
    log_path: Path
    metrics_port: int = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=timeout_s)


def start_operator(
    plane: ControlPlane,
    log_path: Path,
    extra_env: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    timeout_s: float = 30.0,
) -> OperatorProcess:
    """Start the operator (appending to ``log_path``) and wait for its /healthz.

    Raises :class:`scidmz.testenv.cluster.ControlPlaneError` if it exits or stays unhealthy.
    """
    port, metrics_port = free_port(), free_port()
    namespace = (extra_env or {}).get("SCIDMZ_OPERATOR_NAMESPACE", "scidmz-system")
    if plane.kubectl("get", "namespace", namespace, check=False).returncode != 0:
        plane.kubectl("create", "namespace", namespace)  # the chart's release namespace
    env = {
        **plane.env(),
        "SCIDMZ_HEALTH_PORT": str(port),
        "SCIDMZ_METRICS_PORT": str(metrics_port),
        "PYTHONUNBUFFERED": "1",
        **(extra_env or {}),
    }
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scidmz.cli", "operator", *extra_args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/healthz", timeout_s, proc)
        wait_http_ok(f"http://127.0.0.1:{metrics_port}/metrics", timeout_s, proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return OperatorProcess(
        proc=proc, health_port=port, log_path=log_path, metrics_port=metrics_port
    )

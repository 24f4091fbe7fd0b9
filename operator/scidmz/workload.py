"""Shared start-up of the collector and controller processes.

Until the telemetry and control loops land, both validate their runtime config (start-up
stops with a clear message on a bad file), serve /healthz, /readyz and /metrics, and wait
for SIGTERM. Readiness says plainly that the loop is not implemented yet.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

from prometheus_client import Gauge

from scidmz import __version__
from scidmz.api.runtime import RuntimeConfig, load_runtime_config
from scidmz.metrics.http import Health, serve_http

_INFO = Gauge(
    "scidmz_build_info",
    "Constant 1, labelled with the component and version.",
    ["component", "version"],
)


def run_placeholder(component: str, config_path: Path, default_port: int) -> RuntimeConfig:
    """Validate, serve health, block until SIGTERM/SIGINT. Raises ConfigError on bad input."""
    config = load_runtime_config(config_path)
    port = int(os.environ.get("SCIDMZ_HTTP_PORT", default_port))
    health = Health()
    _INFO.labels(component, __version__).set(1)

    def state() -> dict[str, Any]:
        return {"component": component, "policy": config.policy, "ready": health.ready}

    server = serve_http(port, health, state)
    health.set_ready(
        True,
        f"config for {config.namespace}/{config.policy} is valid; "
        f"the {component} loop is not implemented in this release",
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    return config

"""The collector as a process: the sample stream's gRPC server, HTTP, signals, the loop."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc

from scidmz import __version__
from scidmz.api.runtime import (
    ConfigError,
    RuntimeConfig,
    config_changes,
    load_runtime_config,
    restart_relevant,
)
from scidmz.auth.channels import add_port, server_options
from scidmz.metrics.endpoint import serve_http
from scidmz.metrics.http import register_build_info
from scidmz.proto import telemetry_pb2_grpc
from scidmz.telemetry.collector import Collector, CollectorError, CollectorSettings
from scidmz.telemetry.collector_config import check_runtime_config, dtn_plan

log = logging.getLogger(__name__)


class CollectorProcess:
    def __init__(
        self,
        settings: CollectorSettings,
        listen: str,
        http_port: int,
        config: tuple[Path, RuntimeConfig] | None = None,
    ) -> None:
        """``config``: the runtime config file and what it held at start, followed for the
        DTN classes (``RuntimeConfig.dtn_classes``, taken live)."""
        self.collector = Collector(settings)
        register_build_info(self.collector.registry, "collector")
        self.listen = listen
        self.http_port = http_port
        self.config = config
        self.reload_requested = asyncio.Event()
        """Set (e.g. on SIGHUP) to read the config file now instead of at the next poll."""

    async def follow_config(self) -> None:
        """Poll the config file every sample time (at once on ``reload_requested``) and take
        a new set of DTN classes live; other changes of what the collector reads wait for
        a restart (the operator rolls its pod for them) and are logged."""
        if self.config is None:
            return
        path, running = self.config
        interval = lambda: self.collector.settings.sample_time_s  # noqa: E731
        async for _ in config_changes(path, self.reload_requested, interval):
            try:
                wanted = load_runtime_config(path)
                check_runtime_config(wanted)
            except ConfigError as error:
                log.error("config %s not taken, running on as before: %s", path, error)
                continue
            plan = replace(self.collector.plan, dtn_classes=dtn_plan(wanted))
            await self.collector.set_plan(plan)
            if restart_relevant(wanted, "collector") != restart_relevant(running, "collector"):
                log.warning(
                    "config %s: changes beyond the DTN classes take effect after a restart",
                    path,
                )

    def state(self) -> dict[str, Any]:
        latest = self.collector.stream.latest
        return {
            "component": "collector",
            "version": __version__,
            "link": self.collector.settings.link,
            "ready": self.collector.health.ready,
            "reason": self.collector.health.reason,
            "primary": self.collector.is_primary,
            "sequence": latest.sequence if latest else 0,
            "stale": latest.stale if latest else None,
            "dtn_classes": {d.host: d.class_id for d in self.collector.plan.dtn_classes},
            "unmeasured_dtn_hosts": [d.host for d in self.collector.unfitted],
        }

    async def serve(self, stop: asyncio.Event) -> None:
        """Serve until ``stop``; raises ``CollectorError`` on a fatal configuration error."""
        tls = self.collector.settings.channel_tls
        try:
            http = serve_http(
                self.http_port,
                self.collector.health,
                self.state,
                self.collector.registry,
                tls=tls,
            )
        except OSError as error:
            raise CollectorError(
                f"cannot serve /metrics on port {self.http_port}: {error.strerror or error}"
            ) from None
        server = grpc.aio.server(options=server_options())
        telemetry_pb2_grpc.add_TelemetryServicer_to_server(self.collector.stream, server)
        bound = add_port(server, self.listen, tls)
        if bound == 0:
            http.shutdown()
            raise CollectorError(f"cannot listen on {self.listen}: port in use or address invalid")
        await server.start()
        log.info(
            "collector for %s: samples on %s (%s), metrics on :%d, switch %s",
            self.collector.settings.link, self.listen,
            "mutual TLS" if tls is not None else "PLAINTEXT", self.http_port,
            self.collector.settings.address,
        )  # fmt: skip
        follower = asyncio.create_task(self.follow_config(), name="config")
        try:
            await self.collector.run(stop)
        finally:
            follower.cancel()
            http.shutdown()
            await server.stop(0.5)

    def run_until_signalled(self) -> str | None:
        """Run until SIGTERM/SIGINT; returns an error message on a fatal error."""

        async def main() -> str | None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            loop.add_signal_handler(signal.SIGHUP, self.reload_requested.set)
            try:
                await self.serve(stop)
            except CollectorError as error:
                return str(error)
            return None

        return asyncio.run(main())

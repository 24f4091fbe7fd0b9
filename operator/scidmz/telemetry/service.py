"""The collector as a process: the sample stream's gRPC server, HTTP, signals, the loop."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

import grpc

from scidmz import __version__
from scidmz.auth.channels import add_port, server_options
from scidmz.metrics.endpoint import serve_http
from scidmz.metrics.http import register_build_info
from scidmz.proto import telemetry_pb2_grpc
from scidmz.telemetry.collector import Collector, CollectorError, CollectorSettings

log = logging.getLogger(__name__)


class CollectorProcess:
    def __init__(self, settings: CollectorSettings, listen: str, http_port: int) -> None:
        self.collector = Collector(settings)
        register_build_info(self.collector.registry, "collector")
        self.listen = listen
        self.http_port = http_port

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
        try:
            await self.collector.run(stop)
        finally:
            http.shutdown()
            await server.stop(0.5)

    def run_until_signalled(self) -> str | None:
        """Run until SIGTERM/SIGINT; returns an error message on a fatal error."""

        async def main() -> str | None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            try:
                await self.serve(stop)
            except CollectorError as error:
                return str(error)
            return None

        return asyncio.run(main())

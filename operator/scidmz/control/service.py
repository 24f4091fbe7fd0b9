"""The controller as a process: HTTP (/metrics, /healthz, /readyz, /state), signals, loop."""

from __future__ import annotations

import asyncio
import logging

from scidmz.control.actuators import Actuator
from scidmz.control.loop import Controller, ControllerSettings
from scidmz.control.model import InverseModel
from scidmz.metrics.http import register_build_info, serve_http

log = logging.getLogger(__name__)


class ControllerProcess:
    def __init__(
        self,
        settings: ControllerSettings,
        actuator: Actuator,
        model: InverseModel | None,
        http_port: int,
        dtn_actuator: Actuator | None = None,
    ) -> None:
        self.controller = Controller(settings, actuator, model, dtn_actuator=dtn_actuator)
        self.http_port = http_port
        register_build_info(self.controller.registry, "controller")

    async def _health(self, stop: asyncio.Event) -> None:
        c = self.controller
        while not stop.is_set():
            if c.failsafe_active:
                c_reason = "fail-safe rate applied: no fresh samples"
                ready = False
            elif c.latest is None:
                c_reason = f"waiting for samples from {c.settings.collector_address}"
                ready = False
            else:
                c_reason = f"{c.settings.strategy} controlling, u = {c.applied_bps or 0:.0f} bit/s"
                if c.dtn_actuator is not None:
                    c_reason += f", DTN cap {c.dtn_applied_bps or 0:.0f} bit/s"
                ready = True
            # the controller keeps running either way; readiness tells the operator
            self.health.set_ready(ready, c_reason)
            await asyncio.sleep(0.5)

    async def serve(self, stop: asyncio.Event) -> None:
        from scidmz.metrics.http import Health

        self.health = Health()
        http = serve_http(
            self.http_port,
            self.health,
            lambda: self.controller.state().model_dump(mode="json"),
            self.controller.registry,
        )
        s = self.controller.settings
        log.info(
            "controller for %s: %s, actuator %s, samples from %s, metrics on :%d",
            s.policy, s.strategy, self.controller.actuator.name, s.collector_address,
            self.http_port,
        )  # fmt: skip
        health = asyncio.create_task(self._health(stop))
        try:
            await self.controller.run(stop)
        finally:
            health.cancel()
            await self.controller.actuator.close()
            if self.controller.dtn_actuator is not None:
                await self.controller.dtn_actuator.close()
            http.shutdown()

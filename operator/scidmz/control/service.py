"""The controller as a process: HTTP (/metrics, /healthz, /readyz, /state), signals, loop,
and its config file watched for live changes (``control.live_config``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry

from scidmz.api.runtime import (
    ConfigError,
    RuntimeConfig,
    config_changes,
    load_runtime_config,
)
from scidmz.auth.tls_source import TlsSource
from scidmz.control.actuators import Actuator
from scidmz.control.buffer_actuators import BufferActuator
from scidmz.control.live_config import model_change, plan_reload
from scidmz.control.loop import Controller, ControllerSettings
from scidmz.control.model import InverseModel
from scidmz.control.settings import buffer_loop, dtn_cap_actuator, load_model
from scidmz.metrics.endpoint import serve_http
from scidmz.metrics.http import register_build_info

log = logging.getLogger(__name__)


class ControllerProcess:
    def __init__(
        self,
        settings: ControllerSettings,
        actuator: Actuator,
        model: InverseModel | None,
        http_port: int,
        dtn_actuator: Actuator | None = None,
        config: tuple[Path, RuntimeConfig] | None = None,
        tls: TlsSource | None = None,
        buffer_actuator: BufferActuator | None = None,
        model_path: Path | None = None,
        probes_on_loopback: bool = False,
        more_dtn_actuators: Mapping[str, Actuator] | None = None,
    ) -> None:
        """``config``: the file the settings came from and its contents, watched for
        changes (None: not watched); ``tls``: this controller's certificate, for its
        /metrics and /state (None: plaintext, development only); ``model_path``: the
        inverse model given on the command line (None: the shipped one of the DTN's
        congestion control, swapped live when the policy's congestion control changes);
        ``probes_on_loopback``: on the node's network (``scidmz.metrics.endpoint``);
        ``more_dtn_actuators``: the caps of ``settings.more_dtns``, by host."""
        self.model_path = model_path
        self.probes_on_loopback = probes_on_loopback
        self.tls = tls
        registry = CollectorRegistry()
        if buffer_actuator is not None and config is None:
            raise ValueError("a buffer actuator needs the runtime config (its spec.buffer)")
        buffer = buffer_loop(config[1], buffer_actuator, registry) if config is not None else None
        self.controller = Controller(
            settings, actuator, model, registry, dtn_actuator=dtn_actuator, buffer=buffer,
            more_dtn_actuators=more_dtn_actuators,
        )  # fmt: skip
        self._retired: list[Actuator] = []
        """Actuators of caps a reload dropped, closed by the config watcher."""
        self.http_port = http_port
        self.config = config
        self.reload_requested = asyncio.Event()
        """Set (e.g. on SIGHUP) to read the config file now instead of at the next poll."""
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
            elif c.nothing_admitted:
                c_reason = f"idle: no policy admitted, u = {c.applied_bps or 0:.0f} bit/s"
                ready = True
            elif c.pinned:
                c_reason = (
                    f"not controlling: u = {c.applied_bps or 0:.0f} bit/s held at its limit by "
                    f"the integral for {c.pinned_for_s:.0f} s (pinnedAfter "
                    f"{c.settings.pinned_after_s:g} s)"
                )
                ready = False
            else:
                c_reason = f"{c.settings.strategy} controlling, u = {c.applied_bps or 0:.0f} bit/s"
                caps = ", ".join(
                    f"{cap.control.host or 'DTN'} {cap.applied_bps or 0:.0f}" for cap in c.caps
                )
                if caps:
                    c_reason += f", DTN caps (bit/s) {caps}"
                ready = True
            # the controller keeps running either way; readiness tells the operator
            self.health.set_ready(ready, c_reason)
            await asyncio.sleep(0.5)

    async def serve(self, stop: asyncio.Event) -> bool:
        """Run until ``stop``; False if the fail-safe rates could not be restored."""
        from scidmz.metrics.http import Health

        self.health = Health()
        try:
            http = serve_http(
                self.http_port,
                self.health,
                lambda: self.controller.state().model_dump(mode="json"),
                self.controller.registry,
                tls=self.tls,
                probes_on_loopback=self.probes_on_loopback,
            )
        except OSError as error:
            await self._close_actuators()
            raise ConfigError(
                f"cannot serve /metrics on port {self.http_port}: {error.strerror or error}"
            ) from None
        s = self.controller.settings
        log.info(
            "controller for %s: %s, actuator %s, samples from %s, metrics on :%d",
            s.link, s.strategy, self.controller.actuator.name, s.collector_address,
            self.http_port,
        )  # fmt: skip
        tasks = [asyncio.create_task(self._health(stop))]
        if self.config is not None:
            tasks.append(asyncio.create_task(self._watch_config(*self.config)))
        try:
            return await self.controller.run(stop)
        finally:
            for task in tasks:
                task.cancel()
            await self._close_actuators()
            http.shutdown()

    async def _close_actuators(self) -> None:
        await self.controller.actuator.close()
        for cap in self.controller.caps:
            await cap.actuator.close()
        await self._close_retired()
        if self.controller.buffer is not None:
            await self.controller.buffer.close()

    async def _watch_config(self, path: Path, started_with: RuntimeConfig) -> None:
        """Poll ``path`` every sample time (or at once on ``reload_requested``); a change
        is validated as at start-up, and its live fields are taken (``live_config``). An
        invalid file changes nothing: the controller runs on, and says why in its log and
        in ``scidmz_controller_config_reloads_total{result="rejected"}``."""
        running = started_with
        interval = lambda: self.controller.settings.sample_time_s  # noqa: E731 (live)
        async for _ in config_changes(path, self.reload_requested, interval):
            running = await self.reload_live(path, running)

    async def reload_live(self, path: Path, running: RuntimeConfig) -> RuntimeConfig:
        """:meth:`reload` between two decisions, and the actuators of the caps it dropped
        closed: a cap dropped here may be the one a decision in flight is setting (found on
        the lab: a DTN's policy removed, its shaper's channel closed under the call)."""
        async with self.controller.actuation():
            now = self.reload(path, running)
            await self._close_retired()
        return now

    async def _close_retired(self) -> None:
        retired, self._retired = self._retired, []
        for actuator in retired:
            await actuator.close()

    def reload(self, path: Path, running: RuntimeConfig) -> RuntimeConfig:
        """Take ``path``'s live changes into the running controller; ``running`` is the
        config the process runs on (its actuators from start-up, its model from the last
        reload). Returns the config now running."""
        c = self.controller
        counter = c.metrics.config_reloads
        try:
            wanted = load_runtime_config(path)
            update = plan_reload(running, c.settings, wanted)
            model = None
            # --model (a path) wins over the default models, unless none is loaded yet (the
            # process started as pi)
            if model_change(running, wanted) and (self.model_path is None or c.model is None):
                model = load_model(wanted, self.model_path)
        except ConfigError as error:
            counter.labels(*c.metrics.labels, "rejected").inc()
            log.error("config %s not taken, running on as before: %s", path, error)
            return running
        if model is not None:
            c.model = model
            log.info(
                "config %s: strategy %s, the DTN's congestion control %s; its inverse model "
                "taken", path, wanted.controller.strategy, wanted.dtn_congestion_control,
            )  # fmt: skip
        elif model_change(running, wanted):
            log.warning(
                "config %s: the DTN's congestion control is now %s; --model %s kept",
                path, wanted.dtn_congestion_control, self.model_path,
            )  # fmt: skip
        if update.applied or update.new_caps:
            try:
                added = {
                    cap.host: dtn_cap_actuator(wanted, cap)
                    for cap in wanted.actuator.dtns
                    if cap.host in update.new_caps
                }
            except ConfigError as error:
                counter.labels(*c.metrics.labels, "rejected").inc()
                log.error("config %s not taken, running on as before: %s", path, error)
                return running
            self._retired += c.reconfigure(update.settings, added, renew=update.new_caps)
            s = update.settings
            log.info(
                "config %s: took %s live (R* %.0f bit/s, fail-safe %.0f bit/s)",
                path, ", ".join(update.applied), s.setpoint.target_rate_bps, s.failsafe_rate_bps,
            )  # fmt: skip
        if update.needs_restart:
            counter.labels(*c.metrics.labels, "restart_needed").inc()
            log.warning(
                "config %s: %s changed and take effect only after a restart; running on the "
                "old ones", path, ", ".join(update.needs_restart),
            )  # fmt: skip
        elif update.applied or model is not None:
            counter.labels(*c.metrics.labels, "applied").inc()
        # the wiring stays as started; the congestion control (its model) is now wanted's
        caps = {"dtn": wanted.actuator.dtn, "more_dtns": wanted.actuator.more_dtns}
        strategy = c.settings.strategy  # wanted's where taken live (mlc and pi)
        return running.model_copy(
            update={
                "controller": running.controller.model_copy(update={"strategy": strategy}),
                "dtn_congestion_control": wanted.dtn_congestion_control,
                # the caps are taken live: their actuators are now wanted's
                "actuator": running.actuator.model_copy(update=caps),
            }
        )

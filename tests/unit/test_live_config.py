"""A running controller takes a changed config: what it takes live, what needs a restart,
what it refuses (``control.live_config``, ``Controller.reconfigure``)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from scidmz.api.policy import parse_spec
from scidmz.api.runtime import (
    ConfigError,
    RuntimeConfig,
    resolve_runtime_config,
    restart_relevant,
)
from scidmz.control.actuators import DryRunActuator
from scidmz.control.antiwindup import Gains
from scidmz.control.features import Setpoint
from scidmz.control.live_config import live_update, plan_reload
from scidmz.control.loop import Controller, DtnControl
from scidmz.control.settings import controller_settings
from tests.unit.test_controller_loop import MBPS, SETTINGS, Clock, _sample

EXAMPLE = Path(__file__).parents[2] / "examples" / "dtntransferpolicy.yaml"


def _rendered(**spec_changes: object) -> RuntimeConfig:
    raw = yaml.safe_load(EXAMPLE.read_text())["spec"] | spec_changes
    return resolve_runtime_config("p", "ns", 1, parse_spec(raw), "collector:1")


def test_the_setpoint_gains_limits_and_failsafe_are_taken_live() -> None:
    wanted = dataclasses.replace(
        SETTINGS,
        setpoint=Setpoint(700 * MBPS, 1000 * MBPS),
        gains=Gains(0.5, 0.0, 0.0),
        failsafe_rate_bps=300 * MBPS,
        stale_after_s=5.0,
    )
    update = live_update(SETTINGS, wanted)
    assert update.settings == wanted
    assert set(update.applied) == {"setpoint", "gains", "failsafe_rate_bps", "stale_after_s"}
    assert update.needs_restart == ()


def test_what_the_controller_is_built_around_needs_a_restart_and_is_kept() -> None:
    wanted = dataclasses.replace(
        SETTINGS,
        setpoint=Setpoint(700 * MBPS, 1000 * MBPS),
        strategy="mlc",
        sample_time_s=0.5,
        collector_address="elsewhere:1",
    )
    update = live_update(SETTINGS, wanted)
    assert update.applied == ("setpoint",)
    assert set(update.needs_restart) == {"strategy", "sample_time_s", "collector_address"}
    assert update.settings.strategy == "pi" and update.settings.sample_time_s == 1.0
    assert update.settings.setpoint.target_rate_bps == 700 * MBPS
    # a DTN filter comes with an actuator: it cannot appear in a running process
    dtn = DtnControl(Gains(0.1, 0, 0), SETTINGS.limits, None)
    with_dtn = dataclasses.replace(SETTINGS, dtn=dtn)
    assert live_update(SETTINGS, with_dtn).needs_restart == ("dtn",)
    assert live_update(SETTINGS, with_dtn).settings.dtn is None


def test_a_new_target_rate_in_the_rendered_config_moves_the_setpoint_and_failsafe() -> None:
    running = _rendered()
    settings = controller_settings(running)
    update = plan_reload(running, settings, _rendered(targetRate="700Mbps"))
    assert set(update.applied) == {"setpoint", "failsafe_rate_bps"}  # failsafe: trivial
    assert update.settings.setpoint.target_rate_bps == 7e8
    assert update.settings.failsafe_rate_bps == pytest.approx(3e8)
    assert update.needs_restart == ()
    # nothing changed: nothing to do
    assert plan_reload(running, settings, running).applied == ()


def test_a_new_actuator_or_congestion_control_needs_a_restart() -> None:
    running = _rendered()
    settings = controller_settings(running)
    dry = _rendered(actuator={"type": "dryRun"})
    assert plan_reload(running, settings, dry).needs_restart == ("actuator or model",)
    # bbr: another inverse model (and its tuned gains, which are taken)
    bbr = plan_reload(running, settings, _rendered(dtn={**_spec_dtn(), "congestionControl": "bbr"}))
    assert "actuator or model" in bbr.needs_restart
    assert "gains" in bbr.applied


def _spec_dtn() -> dict[str, object]:
    dtn: dict[str, object] = yaml.safe_load(EXAMPLE.read_text())["spec"]["dtn"]
    return dtn


def test_limits_a_filter_refuses_are_rejected_naming_the_field() -> None:
    running = _rendered()
    controller = running.controller.model_copy(update={"min_rate_bps": 9e8, "max_rate_bps": 1e8})
    wanted = running.model_copy(update={"controller": controller})
    with pytest.raises(ConfigError, match=r"controller\.limits"):
        plan_reload(running, controller_settings(running), wanted)


def test_a_reconfigured_controller_decides_on_the_new_target_from_its_state() -> None:
    """trivial follows B − R* at once (within maxStep); pi keeps its integral, so u moves
    from the rate in force instead of restarting from the feed-forward."""

    async def main() -> tuple[list[float], list[float]]:
        trivial = dataclasses.replace(SETTINGS, strategy="trivial")
        applied = []
        for settings in (trivial, SETTINGS):
            clock, actuator = Clock(), DryRunActuator()
            controller = Controller(settings, actuator, clock=clock)
            for k in range(5):
                clock.now += 1.0
                await controller.on_sample(_sample(k, 500))
            before = controller.filter
            controller.reconfigure(
                dataclasses.replace(settings, setpoint=Setpoint(500 * MBPS, 1000 * MBPS))
            )
            assert controller.filter is before
            assert controller.state().target_rate_bps == 500 * MBPS
            clock.now += 1.0
            await controller.on_sample(_sample(5, 500))
            applied.append(actuator.applied)
        return applied[0], applied[1]

    trivial, pi = asyncio.run(main())
    assert trivial[-2] == 400 * MBPS and trivial[-1] == 500 * MBPS
    # pi: the DTN below 600 drove u far under 400; the integral carries over the new R*,
    # so u stays near where it was (a restarted filter would head for B − R* = 500 and
    # apply 70 + maxStep = 270 Mb/s)
    assert pi[-2] < 100 * MBPS
    assert abs(pi[-1] - pi[-2]) < 50 * MBPS


WITH_DTN_CAP = {"actuator": {"type": "sim", "dtn": {"type": "sim", "sim": {"address": "t:1"}}}}


def _controller(**changes: object) -> dict[str, object]:
    """The example's controller section with ``changes`` (camelCase keys)."""
    controller: dict[str, object] = yaml.safe_load(EXAMPLE.read_text())["spec"]["controller"]
    return {"controller": controller | changes}


LIVE_SPEC_CHANGES: dict[str, dict[str, object]] = {
    "targetRate": {"targetRate": "700Mbps"},
    "bottleneckCapacity": {"bottleneckCapacity": "2Gbps"},
    "gains": _controller(gains={"kp": 0.3, "ki": 0.1, "kw": 0.2}),
    "limits": _controller(limits={"min": "50Mbps", "max": "900Mbps", "maxStep": "100Mbps"}),
    "integral band": _controller(limits={"integralBand": "20Mbps"}),
    "desired RTTs": _controller(desiredState={"dtnRtt": "90ms", "campusRtt": "12ms"}),
    "failsafe": {"failsafe": {"staleAfter": "5s", "rate": "300Mbps"}},
}
"""Spec changes a running controller takes live (the example policy, one at a time)."""
RESTART_SPEC_CHANGES: dict[str, dict[str, object]] = {
    "strategy": _controller(strategy="pi"),
    "desired-state mode": _controller(desiredState={"mode": "table3"}),
    "sampleTime": {"sampleTime": "2s"},
    "congestion control": {"dtn": {**_spec_dtn(), "congestionControl": "bbr"}},
    "actuator": {"actuator": {"type": "dryRun"}},
    "a DTN cap": WITH_DTN_CAP,
    "switch": {"switch": {**yaml.safe_load(EXAMPLE.read_text())["spec"]["switch"],
                          "address": "elsewhere:9559"}},
}  # fmt: skip
"""Spec changes the controller is built around: the pods must be rolled."""
COLLECTOR_SPEC_CHANGES: dict[str, dict[str, object]] = {
    "telemetry": {"telemetry": {"rttSmoothing": 0.5}},
}
"""Spec changes only the collector reads (it takes nothing live): the pods are rolled."""


@pytest.mark.parametrize(
    ("change", "restart"),
    [(c, False) for c in LIVE_SPEC_CHANGES.values()]
    + [(c, True) for c in RESTART_SPEC_CHANGES.values()],
    ids=[*LIVE_SPEC_CHANGES, *RESTART_SPEC_CHANGES],
)
def test_what_the_operator_rolls_is_what_the_controller_cannot_take_live(
    change: dict[str, object], restart: bool
) -> None:
    """``api.runtime.restart_relevant`` (the operator's reason to roll the pods) and
    ``plan_reload`` (the running controller's) agree on every change the controller
    reads; the generation, which every spec change bumps, is not a reason."""
    running = _rendered()
    raw = yaml.safe_load(EXAMPLE.read_text())["spec"] | change
    wanted = resolve_runtime_config("p", "ns", 2, parse_spec(raw), "collector:1")
    update = plan_reload(running, controller_settings(running), wanted)
    assert (restart_relevant(running) != restart_relevant(wanted)) is restart
    assert (update.needs_restart != ()) is restart
    assert restart or update.applied


@pytest.mark.parametrize("change", COLLECTOR_SPEC_CHANGES.values(), ids=[*COLLECTOR_SPEC_CHANGES])
def test_what_only_the_collector_reads_rolls_the_pods(change: dict[str, object]) -> None:
    running = _rendered()
    raw = yaml.safe_load(EXAMPLE.read_text())["spec"] | change
    wanted = resolve_runtime_config("p", "ns", 2, parse_spec(raw), "collector:1")
    assert restart_relevant(running) != restart_relevant(wanted)
    update = plan_reload(running, controller_settings(running), wanted)
    assert update.applied == update.needs_restart == ()


def test_the_dtn_caps_gains_and_failsafe_are_live_too() -> None:
    with_cap = yaml.safe_load(EXAMPLE.read_text())["spec"] | WITH_DTN_CAP
    running = resolve_runtime_config("p", "ns", 1, parse_spec(with_cap), "collector:1")
    dtn = {**WITH_DTN_CAP["actuator"]["dtn"], "gains": {"kp": 0.2, "ki": 0.1, "kw": 0.1},  # type: ignore[index]
           "failsafeRate": "550Mbps"}  # fmt: skip
    changed = with_cap | {"actuator": {"type": "sim", "dtn": dtn}}
    wanted = resolve_runtime_config("p", "ns", 2, parse_spec(changed), "collector:1")
    update = plan_reload(running, controller_settings(running), wanted)
    assert update.applied == ("dtn",) and update.needs_restart == ()
    assert restart_relevant(running) == restart_relevant(wanted)


def test_the_integral_band_reaches_the_campus_filter_and_older_configs_get_the_default() -> None:
    explicit = _rendered(**_controller(limits={"integralBand": "20Mbps"}), **WITH_DTN_CAP)
    settings = controller_settings(explicit)
    assert settings.limits.integral_band_bps == 20 * MBPS
    # the DTN cap's filter integrates always (its feed-forward leaves ~8 % of R*)
    assert settings.dtn is not None and settings.dtn.limits.integral_band_bps == math.inf
    # a ConfigMap rendered before the band existed: the API's default for a cubic DTN
    older = explicit.model_copy(
        update={"controller": explicit.controller.model_copy(update={"integral_band_bps": None})}
    )
    assert controller_settings(older).limits.integral_band_bps == pytest.approx(
        0.05 * explicit.bottleneck_capacity_bps
    )


def test_an_unreadable_config_is_no_change_and_only_new_bytes_are() -> None:
    from scidmz.api.runtime import config_changed

    assert config_changed(b"a", b"b")
    assert not config_changed(b"a", b"a")
    assert not config_changed(b"a", None)  # mid-update, or gone: run on as configured
    assert config_changed(None, b"a")  # unreadable at start, readable now


def test_the_shaper_follows_changes_and_runs_on_through_a_vanished_file(tmp_path) -> None:
    import asyncio

    from scidmz.control.shaper import follow_config

    path = tmp_path / "config.yaml"
    path.write_text("rate: 1\n")
    retuned: list[tuple[float, float]] = []

    class Service:
        async def retune(self, failsafe_rate_bps: float, stale_after_s: float) -> None:
            retuned.append((failsafe_rate_bps, stale_after_s))

    def load(p):
        return float(p.read_text().split()[1]), 3.0

    async def main() -> None:
        task = asyncio.create_task(follow_config(Service(), path, load, period_s=0.01))
        await asyncio.sleep(0.05)
        path.unlink()
        await asyncio.sleep(0.05)
        path.write_text("rate: 1\n")  # back as it was: nothing to do
        await asyncio.sleep(0.05)
        path.write_text("rate: 2\n")
        await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(main())
    assert retuned == [(2.0, 3.0)]

"""A running controller takes a changed config: what it takes live, what needs a restart,
what it refuses (``control.live_config``, ``Controller.reconfigure``)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
from typing import Any

import pytest

from scidmz.api.runtime import (
    ConfigError,
    RuntimeConfig,
    restart_relevant,
)
from scidmz.control.actuators import DryRunActuator
from scidmz.control.antiwindup import Gains
from scidmz.control.dtn_caps import DtnControl
from scidmz.control.features import Setpoint
from scidmz.control.live_config import live_update, model_change, plan_reload
from scidmz.control.loop import Controller
from scidmz.control.settings import controller_settings
from tests.loops import link_spec, policy_spec, render
from tests.unit.test_controller_loop import MBPS, SETTINGS, Clock, _sample

Change = tuple[dict[str, Any], dict[str, Any]]
"""A change of the example: (link spec keys, policy spec keys)."""


def _rendered(change: Change = ({}, {}), generation: int = 1) -> RuntimeConfig:
    link, policy = change
    return render(link_spec(**link), policy_spec(**policy), generation)


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
        strategy="trivial",
        sample_time_s=0.5,
        collector_address="elsewhere:1",
    )
    update = live_update(SETTINGS, wanted)
    assert update.applied == ("setpoint",)
    assert set(update.needs_restart) == {"strategy", "sample_time_s", "collector_address"}
    assert update.settings.strategy == "pi" and update.settings.sample_time_s == 1.0
    # between mlc and pi the strategy is live (a mix of congestion controls makes mlc pi)
    to_mlc = live_update(SETTINGS, dataclasses.replace(SETTINGS, strategy="mlc"))
    assert to_mlc.applied == ("strategy",) and to_mlc.needs_restart == ()
    assert update.settings.setpoint.target_rate_bps == 700 * MBPS
    # a DTN cap comes live (a policy admitted on a shaped host): its actuator is to open
    dtn = DtnControl(Gains(0.1, 0, 0), SETTINGS.limits, None, host="dtn-1")
    with_dtn = live_update(SETTINGS, dataclasses.replace(SETTINGS, dtn=dtn))
    assert with_dtn.needs_restart == () and with_dtn.applied == ("dtn",)
    assert with_dtn.new_caps == {"dtn-1"} and with_dtn.settings.dtn == dtn


def test_a_new_target_rate_in_the_rendered_config_moves_the_setpoint_and_failsafe() -> None:
    running = _rendered()
    settings = controller_settings(running)
    update = plan_reload(running, settings, _rendered(({}, {"targetRate": "700Mbps"})))
    # failsafe: trivial; policies: the per-policy target it exports
    assert set(update.applied) == {"setpoint", "failsafe_rate_bps", "policies"}
    assert update.settings.setpoint.target_rate_bps == 7e8
    assert update.settings.failsafe_rate_bps == pytest.approx(3e8)
    assert update.needs_restart == ()
    # nothing changed: nothing to do
    assert plan_reload(running, settings, running).applied == ()


def test_a_new_actuator_needs_a_restart_and_a_new_congestion_control_does_not() -> None:
    running = _rendered()
    settings = controller_settings(running)
    dry = _rendered(({"actuator": {"type": "dryRun"}}, {}))
    assert plan_reload(running, settings, dry).needs_restart == ("actuator or model",)
    # bbr (a tenant's field): its tuned gains are taken and the process loads its model
    wanted = _rendered(({}, {"congestionControl": "bbr"}))
    bbr = plan_reload(running, settings, wanted)
    assert bbr.needs_restart == () and "gains" in bbr.applied
    assert model_change(running, wanted) and not model_change(running, running)
    pi = _rendered((_controller(strategy="pi"), {}))
    pi_bbr = _rendered((_controller(strategy="pi"), {"congestionControl": "bbr"}))
    assert not model_change(pi, pi_bbr)  # no model to swap


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


def _with_cap(**shaper: object) -> dict[str, object]:
    """The example link's DTN host with a DTN cap (sim) of ``shaper`` settings."""
    host = {
        **link_spec()["dtnHosts"][0],
        "shaper": {"type": "sim", "sim": {"address": "t:1"}} | shaper,
    }
    return {"dtnHosts": [host]}


def _controller(**changes: object) -> dict[str, object]:
    """The example link's controller section with ``changes`` (camelCase keys)."""
    controller: dict[str, object] = link_spec()["controller"]
    return {"controller": controller | changes}


WITH_DTN_CAP: Change = (_with_cap(), {})

LIVE_SPEC_CHANGES: dict[str, Change] = {
    "targetRate": ({}, {"targetRate": "700Mbps"}),
    "capacity": ({"capacity": "2Gbps", "controller": {"strategy": "mlc"}}, {}),
    "gains": (_controller(gains={"kp": 0.3, "ki": 0.1, "kw": 0.2}), {}),
    "limits": (_controller(limits={"min": "50Mbps", "max": "900Mbps", "maxStep": "100Mbps"}), {}),
    "integral band": (_controller(limits={"integralBand": "20Mbps"}), {}),
    "desired RTTs": (_controller(desiredState={"dtnRtt": "90ms", "campusRtt": "12ms"}), {}),
    "failsafe": ({"failsafe": {"staleAfter": "5s", "rate": "300Mbps"}}, {}),
    "congestion control": ({}, {"congestionControl": "bbr"}),
    "a DTN cap": WITH_DTN_CAP,
    "strategy mlc to pi": (_controller(strategy="pi"), {}),
}
"""Changes a running controller takes live (the example link and policy, one at a time)."""
RESTART_SPEC_CHANGES: dict[str, Change] = {
    "strategy to trivial": (_controller(strategy="trivial"), {}),
    "desired-state mode": (_controller(desiredState={"mode": "table3"}), {}),
    "sampleTime": ({"sampleTime": "2s"}, {}),
    "actuator": ({"actuator": {"type": "dryRun"}}, {}),
    "switch": ({"switch": {**link_spec()["switch"], "address": "elsewhere:9559"}}, {}),
}
"""Changes the controller is built around: the pods must be rolled."""
COLLECTOR_SPEC_CHANGES: dict[str, Change] = {
    "telemetry": ({"telemetry": {"rttSmoothing": 0.5}}, {}),
}
"""Changes only the collector reads (it takes nothing live): the pods are rolled."""


@pytest.mark.parametrize(
    ("change", "restart"),
    [(c, False) for c in LIVE_SPEC_CHANGES.values()]
    + [(c, True) for c in RESTART_SPEC_CHANGES.values()],
    ids=[*LIVE_SPEC_CHANGES, *RESTART_SPEC_CHANGES],
)
def test_what_the_operator_rolls_is_what_the_controller_cannot_take_live(
    change: Change, restart: bool
) -> None:
    """``api.runtime.restart_relevant`` (the operator's reason to roll the pods) and
    ``plan_reload`` (the running controller's) agree on every change the controller
    reads; the generation, which every spec change bumps, is not a reason."""
    running = _rendered()
    wanted = _rendered(change, generation=2)
    update = plan_reload(running, controller_settings(running), wanted)
    assert (restart_relevant(running) != restart_relevant(wanted)) is restart
    assert (update.needs_restart != ()) is restart
    assert restart or update.applied


@pytest.mark.parametrize("change", COLLECTOR_SPEC_CHANGES.values(), ids=[*COLLECTOR_SPEC_CHANGES])
def test_what_only_the_collector_reads_rolls_the_pods(change: Change) -> None:
    running = _rendered()
    wanted = _rendered(change, generation=2)
    assert restart_relevant(running) != restart_relevant(wanted)
    update = plan_reload(running, controller_settings(running), wanted)
    assert update.applied == update.needs_restart == ()


def test_a_dtn_class_that_comes_or_goes_rolls_no_pod() -> None:
    """A policy admitted onto another DTN host adds its class to the config: the collector
    programs it live (``Collector.set_plan``), the controller does not read it."""
    running = _rendered()
    second = running.dtn_classes[0].model_copy(
        update={"host": "dtn-2", "prefix": "203.0.113.11/32", "class_id": 3}
    )
    wanted = running.model_copy(update={"dtn_classes": [*running.dtn_classes, second]})
    for component in ("controller", "collector", "dtn-shaper"):
        assert restart_relevant(running, component) == restart_relevant(wanted, component)
    update = plan_reload(running, controller_settings(running), wanted)
    assert update.needs_restart == ()


def test_the_dtn_caps_gains_failsafe_and_floor_are_live_too() -> None:
    running = _rendered(WITH_DTN_CAP)
    changed = _with_cap(
        gains={"kp": 0.2, "ki": 0.1, "kw": 0.1}, failsafeRate="550Mbps", minRate="200Mbps"
    )
    wanted = _rendered((changed, {}), generation=2)
    update = plan_reload(running, controller_settings(running), wanted)
    assert update.applied == ("dtn",) and update.needs_restart == ()
    assert restart_relevant(running) == restart_relevant(wanted)


def test_the_integral_band_reaches_the_campus_filter_and_older_configs_get_the_default() -> None:
    explicit = _rendered(({**_controller(limits={"integralBand": "20Mbps"}), **_with_cap()}, {}))
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
        async def retune(self, failsafe_rate_bps: float, stale_after_s: float, bounds) -> None:
            retuned.append((failsafe_rate_bps, stale_after_s))

    def load(p):
        return float(p.read_text().split()[1]), 3.0, None

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


def test_a_running_controller_swaps_its_inverse_model_for_a_new_congestion_control(
    tmp_path,
) -> None:
    """The process side of a live congestion control: the reload loads the other
    congestion control's shipped model and takes its gains, without a restart."""
    import asyncio

    from scidmz.api.runtime import dump_runtime_config
    from scidmz.control.actuators import DryRunActuator
    from scidmz.control.service import ControllerProcess
    from scidmz.control.settings import load_model

    running = _rendered((_controller(strategy="mlc"), {}))
    path = tmp_path / "config.yaml"
    path.write_text(dump_runtime_config(running))

    async def main():
        process = ControllerProcess(
            controller_settings(running), DryRunActuator(), load_model(running, None), 0,
            config=(path, running),
        )  # fmt: skip
        assert process.controller.model is not None
        assert process.controller.model.path.parent.name == "cubic"
        wanted = _rendered((_controller(strategy="mlc"), {"congestionControl": "bbr"}))
        path.write_text(dump_runtime_config(wanted))
        now = process.reload(path, running)
        assert process.controller.model.path.parent.name == "bbr"
        assert process.controller.settings.gains == controller_settings(wanted).gains
        assert now.dtn_congestion_control == "bbr"
        # the same file again: nothing more to do
        assert process.reload(path, now) == now

    asyncio.run(main())


def test_a_policy_that_makes_a_mix_switches_mlc_to_pi_live_and_back(tmp_path) -> None:
    """A second policy with another congestion control: mlc runs as pi on the mix (the
    config says why), and the running controller switches without a restart; the mix gone,
    it loads the inverse model and runs mlc again. u(t) moves by at most maxStep."""
    from scidmz.api.runtime import dump_runtime_config
    from scidmz.control.actuators import DryRunActuator
    from scidmz.control.service import ControllerProcess
    from scidmz.control.settings import load_model
    from tests.loops import render_policies

    link = link_spec(**_controller(strategy="mlc"))
    link["dtnHosts"] = [*link["dtnHosts"],
                        {"name": "dtn-2", "receiverPrefix": "203.0.113.11/32"}]  # fmt: skip
    one = render_policies(link, [policy_spec(targetRate="500Mbps")])
    mix = render_policies(
        link,
        [policy_spec(targetRate="500Mbps"),
         policy_spec(dtnHost="dtn-2", targetRate="200Mbps", congestionControl="bbr")],
    )  # fmt: skip
    assert one.controller.strategy == "mlc" and mix.controller.strategy == "pi"
    assert mix.controller.strategy_note and "mix" in mix.controller.strategy_note
    assert restart_relevant(one) == restart_relevant(mix)  # the operator rolls nothing
    path = tmp_path / "config.yaml"
    path.write_text(dump_runtime_config(one))

    async def main():
        clock, actuator = Clock(), DryRunActuator()
        process = ControllerProcess(
            controller_settings(one), actuator, load_model(one, None), 0, config=(path, one)
        )
        controller = process.controller
        controller._clock = clock
        sequence = 0

        async def run(count: int) -> None:
            nonlocal sequence
            for _ in range(count):
                clock.now += 1.0
                await controller.on_sample(_sample(sequence, 450))
                sequence += 1

        await run(4)
        settled = len(actuator.applied)  # from here on every step is bounded
        path.write_text(dump_runtime_config(mix))
        running = process.reload(path, one)
        assert controller.settings.strategy == "pi" and running.controller.strategy == "pi"
        await run(4)
        path.write_text(dump_runtime_config(one))
        back = process.reload(path, running)
        assert controller.settings.strategy == "mlc" and back.controller.strategy == "mlc"
        assert controller.model is not None
        await run(4)
        applied = actuator.applied[settled - 1 :]
        assert len(applied) == 9
        # the new sum moves u at once, as the fixed split would (``follow_setpoint``: a new
        # R* is the administrators' command); the switch of strategy adds at most maxStep
        shifts = [0.0] * 8
        shifts[0], shifts[4] = -200 * MBPS, +200 * MBPS
        pairs = zip(itertools.pairwise(applied), shifts, strict=True)
        moves = [abs(b - a - shift) for (a, b), shift in pairs]
        assert max(moves) <= controller.settings.limits.max_step_bps + 1e-6, applied
        results = {
            sample.labels["result"]
            for metric in controller.metrics.config_reloads.collect()
            for sample in metric.samples
            if sample.name.endswith("_total") and sample.value > 0
        }
        assert results == {"applied"}, results

    asyncio.run(main())


class _HeldActuator(DryRunActuator):
    """A DTN shaper whose calls wait for ``release`` (a slow agent), and which says when
    it was closed and whether a call was in flight then."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.calling = asyncio.Event()
        self.in_flight = False
        self.closed_in_flight: bool | None = None

    async def apply(self, rate_bps: float) -> float:
        self.in_flight = True
        self.calling.set()
        await self.release.wait()
        self.in_flight = False
        return await super().apply(rate_bps)

    async def close(self) -> None:
        self.closed_in_flight = self.in_flight
        await super().close()


def test_a_policy_removed_while_its_cap_is_being_set_closes_the_cap_after_the_call(
    tmp_path,
) -> None:
    """A reload that drops a DTN host's cap waits for the decision setting it: closed
    under the call, the shaper's channel failed it outside the actuator errors, and the
    controller stopped deciding for good (found on the lab, one removal in three)."""
    from scidmz.api.runtime import dump_runtime_config
    from scidmz.control.service import ControllerProcess
    from tests.loops import render_policies

    shaper = {"type": "sim", "sim": {"address": "t:1"}}
    link = link_spec(**_controller(strategy="pi"))
    link["dtnHosts"] = [{**link["dtnHosts"][0], "shaper": shaper},
                        {"name": "dtn-2", "receiverPrefix": "203.0.113.11/32",
                         "shaper": shaper}]  # fmt: skip
    second = policy_spec(dtnHost="dtn-2", targetRate="200Mbps")
    both = render_policies(link, [policy_spec(targetRate="400Mbps"), second])
    one = render_policies(link, [policy_spec(targetRate="400Mbps")])
    path = tmp_path / "config.yaml"
    path.write_text(dump_runtime_config(both))

    async def main() -> None:
        clock, held = Clock(), _HeldActuator()
        process = ControllerProcess(
            controller_settings(both), DryRunActuator(), None, 0, dtn_actuator=DryRunActuator(),
            config=(path, both), more_dtn_actuators={"dtn-2": held},
        )  # fmt: skip
        controller = process.controller
        controller._clock = clock
        for sequence in range(3):
            held.release.set()
            clock.now += 1.0
            await controller.on_sample(_sample(sequence, 550))
        held.release.clear()
        held.calling.clear()
        clock.now += 1.0
        deciding = asyncio.create_task(controller.on_sample(_sample(3, 550)))
        await asyncio.wait_for(held.calling.wait(), 5)  # the decision is setting dtn-2's cap
        path.write_text(dump_runtime_config(one))
        reloading = asyncio.create_task(process.reload_live(path, both))
        await asyncio.sleep(0.05)
        assert not reloading.done() and held.closed_in_flight is None  # waits its turn
        held.release.set()
        assert (await asyncio.wait_for(deciding, 5)) is not None
        await asyncio.wait_for(reloading, 5)
        assert held.closed_in_flight is False  # closed, but never under a call
        assert [c.control.host for c in controller.caps] == ["dtn-1"]
        clock.now += 1.0
        assert await controller.on_sample(_sample(4, 380)) is not None  # deciding on

    asyncio.run(main())

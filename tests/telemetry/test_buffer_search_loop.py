"""The buffer search in the controller over real gRPC: target(netsim) -> collector ->
controller -> the simulator's rate and buffer actuators. The search starts from the
default buffer, moves the simulator's buffer trial by trial, reports what it holds (read
back from the simulator), and a stopping controller leaves the default buffer behind."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from scidmz.api.runtime import BufferConfig
from scidmz.control.actuators import SimActuator
from scidmz.control.antiwindup import Gains, Limits
from scidmz.control.buffer_actuators import SimBufferActuator
from scidmz.control.buffer_loop import BufferLoop
from scidmz.control.features import Setpoint
from scidmz.control.loop import Controller, ControllerSettings
from scidmz.netsim.scenario import Scenario
from scidmz.telemetry.service import CollectorProcess
from scidmz.testenv.cluster import free_port
from tests.telemetry.harness import running_target, settings, wait_for

MBPS = 1e6
CAPACITY = 1000 * MBPS
CONFIG = BufferConfig(
    actuator_type="sim", min_s=0.01, max_s=0.2, default_s=0.1, max_queue_delay_s=0.2,
    loss_scale=0.05, loss_weight=0.5, delay_weight=0.5, settle_s=1, measure_s=1,
    max_iterations=3, stop_ei=1e-3,
    # the default gate: the twin's tap counts payload bytes, its full link reads ~96 % of B,
    # and the tuner judges the gate against that share (buffer_search.PAYLOAD_SHARE)
    utilisation_gate=0.98,
    change_lag=50, change_threshold=10, change_influence=0.1,
)  # fmt: skip


async def _run():
    scenario = Scenario.model_validate({"bottleneck": {"max_buffer_s": "200ms"}})
    async with running_target(scenario) as (target, address):
        listen = f"127.0.0.1:{free_port()}"
        collector = CollectorProcess(settings(address, sample_time_s=0.5), listen, free_port())
        control = ControllerSettings(
            link="p", strategy="pi", setpoint=Setpoint(600 * MBPS, CAPACITY),
            gains=Gains(0.285, 1.486, 1.565), limits=Limits(0.0, CAPACITY, 200 * MBPS),
            sample_time_s=0.5, stale_after_s=3.0, failsafe_rate_bps=400 * MBPS,
            collector_address=listen,
        )  # fmt: skip
        registry = CollectorRegistry()
        buffer = BufferLoop(CONFIG, SimBufferActuator(address), CAPACITY, 0.5, "p", registry)
        controller = Controller(control, SimActuator(address), None, registry, buffer=buffer)
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(collector.serve(stop)),
            asyncio.create_task(controller.run(stop)),
        ]
        seen: set[float] = set()
        try:
            await wait_for(lambda: len(controller.decisions) >= 1, 30, "a decision")

            def searched() -> bool:
                seen.add(round(target.source.sim.bottleneck_buffer_bytes))
                return len(buffer.tuner.trials) >= 3

            await wait_for(searched, 90, "three buffer trials", step_s=0.1)
            report = controller.state().buffer
            in_sim = target.source.sim.bottleneck_buffer_bytes
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            await controller.actuator.close()
            await buffer.close()
        after_stop = target.source.sim.bottleneck_buffer_bytes
    return report, in_sim, seen, after_stop


def test_the_search_moves_the_simulators_buffer_and_leaves_the_default_when_stopped():
    report, in_sim, seen, after_stop = asyncio.run(_run())
    default_bytes = 0.1 * CAPACITY / 8
    assert report is not None and report.phase in ("expand", "search", "hold")
    assert report.trials >= 3 and report.searches == 1
    # the buffer the controller reports is the one the simulator holds
    assert in_sim == pytest.approx(report.buffer_s * CAPACITY / 8, rel=1e-6)
    assert len(seen - {round(default_bytes)}) >= 2  # at least two buffers besides the default
    assert after_stop == pytest.approx(default_bytes)  # the fail-safe buffer on stop

"""The whole loop over real gRPC: target(netsim) -> collector -> controller -> sim actuator.

For each strategy the DTN rate, as the collector measures it, must settle near the
target: the mean of the last samples within 10 % of R*, at real time, T = 0.5 s. A BBR DTN
does that only with the DTN actuator (the target's SetDtnRateLimit), which the controller
drives beside the campus shaper.
"""

from __future__ import annotations

import asyncio
import statistics

import pytest

from scidmz.control.actuators import SimActuator, SimDtnActuator
from scidmz.control.antiwindup import Gains, Limits
from scidmz.control.dtn_caps import DtnControl
from scidmz.control.features import Setpoint
from scidmz.control.loop import Controller, ControllerSettings
from scidmz.control.model import InverseModel
from scidmz.control.settings import default_models_dir
from scidmz.netsim.scenario import Scenario
from scidmz.telemetry.service import CollectorProcess
from scidmz.testenv.cluster import free_port
from tests.telemetry.harness import running_target, settings, wait_for

MBPS = 1e6
TARGET = 600 * MBPS
SAMPLES = 36
SETTLED = 10


async def _loop(strategy: str, cca: str = "cubic", dtn: bool = False) -> list[float]:
    scenario = Scenario.model_validate({"dtn": {"congestion_control": cca}})
    async with running_target(scenario) as (target, address):
        listen = f"127.0.0.1:{free_port()}"
        collector = CollectorProcess(settings(address, sample_time_s=0.5), listen, free_port())
        control = ControllerSettings(
            link="p", strategy=strategy,
            setpoint=Setpoint(TARGET, 1000 * MBPS), gains=Gains(0.285, 1.486, 1.565),
            limits=Limits(0.0, 1000 * MBPS, 200 * MBPS), sample_time_s=0.5,
            stale_after_s=3.0, failsafe_rate_bps=400 * MBPS, collector_address=listen,
            dtn=DtnControl(Gains(0.1, 0.0, 0.0), Limits(0.0, 1000 * MBPS, 200 * MBPS), None)
            if dtn else None,
        )  # fmt: skip
        model = (
            InverseModel(default_models_dir() / cca / "inverse.onnx") if strategy == "mlc" else None
        )
        controller = Controller(
            control, SimActuator(address), model,
            dtn_actuator=SimDtnActuator(address) if dtn else None,
        )  # fmt: skip
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(collector.serve(stop)),
            asyncio.create_task(controller.run(stop)),
        ]
        try:
            await wait_for(lambda: len(controller.decisions) >= SAMPLES, 60, "samples")
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            await controller.actuator.close()
            if controller.dtn_actuator is not None:
                await controller.dtn_actuator.close()
                # stopping restored the DTN's fail-safe cap (R*) on the simulated DTN
                assert target.source.sim.dtn_rate_limit_bps == TARGET
    return [d.error_bps + TARGET for d in controller.decisions]


@pytest.mark.parametrize("strategy", ["trivial", "pi", "mlc"])
def test_the_dtn_settles_near_its_target(strategy):
    rates = asyncio.run(_loop(strategy))
    settled = statistics.mean(rates[-SETTLED:])
    print(strategy, [round(r / MBPS) for r in rates])
    assert abs(settled - TARGET) / TARGET < 0.10, f"{strategy}: settled at {settled / MBPS:.0f}"


@pytest.mark.parametrize("strategy", ["trivial", "mlc"])
def test_a_bbr_dtn_is_held_with_the_dtn_actuator(strategy):
    rates = asyncio.run(_loop(strategy, "bbr", dtn=True))
    settled = statistics.mean(rates[-SETTLED:])
    print("bbr", strategy, [round(r / MBPS) for r in rates])
    assert abs(settled - TARGET) / TARGET < 0.05, f"bbr {strategy}: settled at {settled / MBPS:.0f}"

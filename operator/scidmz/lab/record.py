"""``scidmz lab record``: a matrix of lab scenarios under fixed or stepped u, stored as
per-second ground truth: the reference the simulator is calibrated against.

The matrix file::

    duration: 60s                # per case (default 60 s)
    bottleneck: 300Mbps          # default B for every case
    cases:
      - name: cubic-10-fixed
        scenario: {dtn: {congestion_control: cubic}, campus: {long_flows: 10}}
        u: 150Mbps               # a fixed campus rate ...
      - name: cubic-10-steps
        scenario: {campus: {long_flows: 10}}
        u_steps: [[0s, 300Mbps], [20s, 150Mbps], [40s, 75Mbps]]   # ... or steps

Each case gets its own lab (up, flows, down) and a folder ``OUT/<name>/`` with
``truth.csv``, ``flows.csv`` (every flow's cwnd, RTT, retransmissions, delivery and pacing
rates and BBR's estimates per second: ``truth.FLOW_COLUMNS``), the
iperf3 logs and ``case.json`` (the full scenario and the u schedule). A case that fails is
recorded as failed in ``OUT/index.json`` and the next one runs.
"""

from __future__ import annotations

import asyncio
import csv
import gzip
import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from scidmz.api.units import UnitError, parse_duration, parse_rate
from scidmz.lab import runner, topology
from scidmz.lab.topology import LabError
from scidmz.lab.traffic import record_truth
from scidmz.netsim.scenario import Scenario, ScenarioError, parse_scenario

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def _rate(value: Any) -> float:
    try:
        return parse_rate(value) if isinstance(value, str) else float(value)
    except UnitError as error:
        raise ValueError(str(error)) from None


def _duration(value: Any) -> float:
    try:
        return parse_duration(value) if isinstance(value, str) else float(value)
    except UnitError as error:
        raise ValueError(str(error)) from None


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    scenario: dict[str, Any] = Field(default_factory=dict)
    u: float | None = None
    u_steps: list[tuple[float, float]] | None = None

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must be lower-case letters, digits and '-' (a folder name)")
        return value

    @field_validator("u", mode="before")
    @classmethod
    def _u(cls, value: Any) -> Any:
        return None if value is None else _rate(value)

    @field_validator("u_steps", mode="before")
    @classmethod
    def _steps(cls, value: Any) -> Any:
        if value is None:
            return None
        return [(_duration(at), _rate(rate)) for at, rate in value]

    @model_validator(mode="after")
    def _one_schedule(self) -> Case:
        if (self.u is None) == (self.u_steps is None):
            raise ValueError("give u or u_steps")
        if self.u_steps is not None and [t for t, _ in self.u_steps] != sorted(
            t for t, _ in self.u_steps
        ):
            raise ValueError("u_steps must be in time order")
        return self

    def schedule(self) -> list[tuple[float, float]]:
        return [(0.0, self.u)] if self.u is not None else list(self.u_steps or [])


class Matrix(BaseModel):
    model_config = ConfigDict(extra="forbid")

    duration: float = 60.0
    bottleneck: str = "300Mbps"
    cases: list[Case] = Field(min_length=1)

    @field_validator("duration", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        return _duration(value)


def load_matrix(path: Path) -> tuple[Matrix, dict[str, Scenario]]:
    """The matrix and every case's scenario, all validated before any lab is built."""
    try:
        raw = yaml.safe_load(path.read_text())
        matrix = Matrix.model_validate(raw)
    except (OSError, yaml.YAMLError, ValueError) as error:
        raise LabError(f"{path}: {error}") from None
    names = [case.name for case in matrix.cases]
    if len(set(names)) != len(names):
        raise LabError(f"{path}: case names must be unique")
    scenarios = {}
    for case in matrix.cases:
        raw_scenario = json.loads(json.dumps(case.scenario))
        raw_scenario.setdefault("bottleneck", {}).setdefault("capacity_bps", matrix.bottleneck)
        try:
            scenario = parse_scenario(raw_scenario, f"{path}: case {case.name}")
            topology.check_scenario(scenario)
        except (ScenarioError, LabError) as error:
            raise LabError(str(error)) from None
        scenarios[case.name] = scenario
    return matrix, scenarios


async def _set_u(rate_bps: float) -> None:
    from scidmz.control.actuators import TcActuator

    namespace, interface = topology.CAMPUS_SHAPER
    actuator = await TcActuator.open(interface, netns=namespace)
    try:
        await actuator.apply(rate_bps)
    finally:
        await actuator.close()


def record_case(
    case: Case, scenario: Scenario, duration_s: float, out: Path, state_dir: Path
) -> Path:
    """One case on a fresh lab; returns its truth.csv."""
    out.mkdir(parents=True, exist_ok=True)
    schedule = case.schedule()
    (out / "case.json").write_text(
        json.dumps(
            {
                "name": case.name,
                "duration_s": duration_s,
                "u_schedule": schedule,
                "scenario": topology.as_built(scenario).model_dump(mode="json"),
            },
            indent=2,
        )
    )
    lab = runner.up(scenario, state_dir=state_dir)
    try:
        pending = list(schedule)

        def step(t_s: float) -> None:
            while pending and pending[0][0] <= t_s:
                asyncio.run(_set_u(pending.pop(0)[1]))

        truth = record_truth(lab, duration_s, out, on_tick=step, flows_csv=True)
    finally:
        runner.down(state_dir)
    compact_case(out)
    return truth


def compact_case(out: Path) -> None:
    """Leave what a dataset keeps of a recorded case: ``case.json``, ``truth.csv`` and
    ``flows.csv.gz`` (gzip without a timestamp: the same rows give the same bytes). The
    iperf3 logs (~2 MB a case, 35 MB a matrix) go; a failed case never gets here and keeps
    them for the post-mortem."""
    flows = out / "flows.csv"
    if flows.exists():
        with flows.open("rb") as source, gzip.GzipFile(out / "flows.csv.gz", "wb", mtime=0) as sink:
            shutil.copyfileobj(source, sink)
        flows.unlink()
    for log in out.glob("iperf3-*"):
        log.unlink()


def truth_rows(case_dir: Path) -> list[dict[str, float]]:
    """A recorded case's ``truth.csv``, one dict of floats per second (unmeasured: ``nan``)."""
    with (case_dir / "truth.csv").open() as handle:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle)]


def mean_queuing_delay_s(row: dict[str, float]) -> float:
    """A truth row's queuing delay: the mean of the second's backlog readings, or, in
    recordings made before the lab read them (2026-11-25), its one snapshot."""
    return row.get("queuing_delay_mean_s", row["queuing_delay_s"])


def record_matrix(
    path: Path,
    out: Path,
    state_dir: Path = runner.STATE_DIR,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Every case of the matrix in turn; writes and returns ``OUT/index.json``."""
    matrix, scenarios = load_matrix(path)
    runner.check_host()
    if runner.existing_namespaces():
        raise LabError("a lab is already up: run `scidmz lab down` first (record builds its own)")
    index: dict[str, Any] = {"matrix": str(path), "cases": {}}
    for number, case in enumerate(matrix.cases, 1):
        progress(f"[{number}/{len(matrix.cases)}] {case.name} ({matrix.duration:.0f} s)")
        started = time.monotonic()
        try:
            record_case(case, scenarios[case.name], matrix.duration, out / case.name, state_dir)
            index["cases"][case.name] = {"status": "ok", "seconds": time.monotonic() - started}
        except (LabError, OSError, RuntimeError) as error:
            progress(f"  {case.name} failed: {error}")
            index["cases"][case.name] = {"status": "failed", "error": str(error)}
        (out / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    return index

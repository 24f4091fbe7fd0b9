"""A u(t) schedule for open-loop runs: explicit steps, or the paper's pseudo-random steps.

YAML, one of::

    steps:                     # u holds each value until the next entry
      - {at: 0s, rate: 1Gbps}
      - {at: 30s, rate: 400Mbps}

    random:                    # paper §3.5: a new uniform value every `every` seconds
      {min: 0bps, max: 1Gbps, every: 1s, seed: 7}

or a CSV file with the header ``time_s,rate_bps``. Before the first entry the scenario's
``shaper.initial_rate_bps`` applies.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from scidmz.api.errors import load_yaml_model, validate_mapping
from scidmz.netsim.scenario import RateBps, Seconds


class ScheduleError(ValueError):
    """A schedule that cannot be used; the message names the offending entry."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RateStep(_Model):
    at: Seconds = Field(ge=0, description="When the rate takes effect.")
    rate: RateBps = Field(ge=0, description="u from then on.")


class RandomSteps(_Model):
    """Uniform pseudo-random u in [min, max], redrawn every ``every`` seconds."""

    min: RateBps = Field(default=0.0, ge=0)
    max: RateBps = Field(gt=0)
    every: Seconds = Field(default=1.0, gt=0)
    seed: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> RandomSteps:
        if self.min > self.max:
            raise ValueError("min must not exceed max")
        return self


class RateSchedule(_Model):
    steps: list[RateStep] | None = None
    random: RandomSteps | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> RateSchedule:
        if (self.steps is None) == (self.random is None):
            raise ValueError("give exactly one of steps or random")
        if self.steps is not None:
            if not self.steps:
                raise ValueError("steps must not be empty")
            times = [step.at for step in self.steps]
            if times != sorted(times):
                raise ValueError("steps must be in time order")
        return self

    def changes(self, start_s: float, end_s: float) -> list[tuple[float, float]]:
        """The (time, rate) changes with ``start_s <= time < end_s``, in order."""
        if self.steps is not None:
            return [(s.at, s.rate) for s in self.steps if start_s <= s.at < end_s]
        assert self.random is not None
        r = self.random
        first = math.ceil(start_s / r.every - 1e-9)
        last = math.ceil(end_s / r.every - 1e-9)
        return [(k * r.every, random_rate(r, k)) for k in range(first, last)]


def random_rate(spec: RandomSteps, index: int) -> float:
    """The value of the ``index``-th random step; independent of how the run is chunked."""
    generator = np.random.default_rng([spec.seed, index])
    return float(spec.min + (spec.max - spec.min) * generator.random())


def parse_schedule(raw: Any, source: str = "schedule") -> RateSchedule:
    return validate_mapping(raw, RateSchedule, source, ScheduleError)


def load_schedule(path: Path) -> RateSchedule:
    """Read a YAML or CSV schedule; nothing runs if it is invalid."""
    if path.suffix.lower() != ".csv":
        return load_yaml_model(path, RateSchedule, "schedule", ScheduleError)
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as error:
        raise ScheduleError(f"cannot read schedule {path}: {error.strerror}") from None
    steps: list[dict[str, Any]] = []
    for number, row in enumerate(rows, start=2):
        if set(row) != {"time_s", "rate_bps"}:
            raise ScheduleError(f"{path}: the header must be exactly time_s,rate_bps")
        try:
            steps.append({"at": float(row["time_s"]), "rate": float(row["rate_bps"])})
        except (TypeError, ValueError):
            raise ScheduleError(f"{path}:{number}: time_s and rate_bps must be numbers") from None
    return parse_schedule({"steps": steps}, str(path))

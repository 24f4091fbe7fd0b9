"""Anti-windup gains per DTN congestion control: ``models/<cca>/gains.yaml``.

The file holds one (Kp, Ki, Kw) triple per filter — ``mlc`` (the inverse model's campus
filter), ``pi`` (the same filter around B − R*) and ``dtn`` (the DTN cap's filter) — with
where each came from: ``scidmz tune`` records the fitness (IAE, eq. 2) and the genetic
algorithm's settings (paper §3.3, table 2) next to the gains it found; a file without them
holds the paper's table 4.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from scidmz.api.errors import load_yaml_model
from scidmz.api.runtime import PAPER_GAINS
from scidmz.api.types import MAX_GAIN

GAINS_FILE = "gains.yaml"
FILTERS = ("mlc", "pi", "dtn")


class GainsFileError(ValueError):
    """A gains file that cannot be used; the message names the field."""


class Triple(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kp: float = Field(ge=0, le=MAX_GAIN, allow_inf_nan=False)
    ki: float = Field(ge=0, le=MAX_GAIN, allow_inf_nan=False)
    kw: float = Field(ge=0, le=MAX_GAIN, allow_inf_nan=False)

    def as_tuple(self) -> tuple[float, float, float]:
        return self.kp, self.ki, self.kw


@dataclass(frozen=True)
class TunedGains:
    cca: str
    mlc: Triple
    pi: Triple
    dtn: Triple
    provenance: dict[str, Any] = field(default_factory=dict)


def paper_gains(cca: str) -> TunedGains:
    """Table 4 for every filter (what a model directory without a gains file gets)."""
    kp, ki, kw = PAPER_GAINS[cca]
    triple = Triple(kp=kp, ki=ki, kw=kw)
    return TunedGains(cca, triple, triple, triple, {"source": "paper table 4"})


class GainsFile(BaseModel):
    """The file's schema: the three triples, plus any provenance (kept as it is)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    mlc: Triple
    pi: Triple
    dtn: Triple


def load_gains(models_dir: Path, cca: str) -> TunedGains:
    """``models_dir/<cca>/gains.yaml``; the paper's gains when there is none. A file that
    is not YAML or misses a field raises ``GainsFileError`` naming it (``pi.ki: ...``)."""
    path = models_dir / cca / GAINS_FILE
    if not path.is_file():
        return paper_gains(cca)
    parsed = load_yaml_model(path, GainsFile, "gains file", GainsFileError)
    return TunedGains(cca, parsed.mlc, parsed.pi, parsed.dtn, dict(parsed.model_extra or {}))


def dump_gains(gains: TunedGains, header: str) -> str:
    body: dict[str, Any] = {name: getattr(gains, name).model_dump() for name in FILTERS}
    body |= gains.provenance
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    return comments + yaml.safe_dump(body, sort_keys=False)

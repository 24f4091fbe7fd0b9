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

from scidmz.api.runtime import PAPER_GAINS
from scidmz.control.antiwindup import MAX_GAIN

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


def load_gains(models_dir: Path, cca: str) -> TunedGains:
    """``models_dir/<cca>/gains.yaml``; the paper's gains when there is none."""
    path = models_dir / cca / GAINS_FILE
    if not path.is_file():
        return paper_gains(cca)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise GainsFileError(f"{path}: not YAML: {error}") from None
    if not isinstance(raw, dict):
        raise GainsFileError(f"{path}: expected a mapping")
    triples: dict[str, Triple] = {}
    for name in FILTERS:
        value = raw.get(name)
        if value is None:
            raise GainsFileError(f"{path}: {name} is missing")
        try:
            triples[name] = Triple.model_validate(value)
        except ValueError as error:
            raise GainsFileError(f"{path}: {name}: {error}") from None
    provenance = {k: v for k, v in raw.items() if k not in FILTERS}
    return TunedGains(cca, triples["mlc"], triples["pi"], triples["dtn"], provenance)


def dump_gains(gains: TunedGains, header: str) -> str:
    body: dict[str, Any] = {name: getattr(gains, name).model_dump() for name in FILTERS}
    body |= gains.provenance
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    return comments + yaml.safe_dump(body, sort_keys=False)

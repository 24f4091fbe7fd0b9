"""A custom inverse model's card, as administrators ship it beside the model in a ConfigMap
(``spec.controller.modelRef``), and whether the link it is meant for lies in its ranges.

The ONNX model carries the machine-readable half of its contract (features, units, target:
``control.model``); the card says what it was identified on. ``scidmz train`` writes both
(``card.yaml`` beside ``inverse.onnx``). A model identified at 1 Gb/s and T = 1 s answers
nonsense at 10 Gb/s or T = 100 ms without any error, so the operator refuses a link whose
capacity, sample time, congestion control or explicit desired RTTs the card does not cover.
Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml
from pydantic import Field, ValidationError

from scidmz.api.errors import describe_validation_error
from scidmz.api.types import ApiModel, CongestionControl, Duration, Rate
from scidmz.api.units import format_rate, parse_duration, parse_rate

if TYPE_CHECKING:
    from scidmz.api.link import BorderLinkSpec

CARD_KIND = "InverseModelCard"
MAX_CARD_BYTES = 64 * 1024


class RateRange(ApiModel):
    min: Rate = Field(description="Lowest rate covered, e.g. 1Gbps.")
    max: Rate = Field(description="Highest rate covered.")


class DurationRange(ApiModel):
    min: Duration = Field(description="Shortest duration covered, e.g. 80ms.")
    max: Duration = Field(description="Longest duration covered.")


class ModelCard(ApiModel):
    """What an inverse model was identified on (``card.yaml``)."""

    kind: str = Field(default=CARD_KIND, pattern=f"^{CARD_KIND}$")
    congestion_control: CongestionControl = Field(
        description="The DTN congestion control it was identified with."
    )
    capacity: RateRange = Field(description="Bottleneck capacities it covers (B_max).")
    sample_time: Duration = Field(description="T it was identified at (paper: 1s).")
    dtn_rtt: DurationRange = Field(description="DTN base RTTs it covers.")
    campus_rtt: DurationRange = Field(description="Campus base RTTs it covers.")
    command: str | None = Field(default=None, max_length=1024, description="How it was made.")


class CardError(ValueError):
    """A card that cannot be read; the message says why."""


def parse_card(text: str) -> ModelCard:
    """``card.yaml`` as a ``ModelCard``; ``CardError`` naming what is wrong."""
    if len(text.encode()) > MAX_CARD_BYTES:
        raise CardError(f"the card is larger than {MAX_CARD_BYTES} bytes")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise CardError(f"not YAML: {error}") from None
    if not isinstance(data, dict):
        raise CardError("not a mapping of the card's fields")
    try:
        return ModelCard.model_validate(data)
    except ValidationError as error:
        raise CardError(describe_validation_error(error)) from None


def _within_rates(value: str, covered: RateRange) -> bool:
    return parse_rate(covered.min) <= parse_rate(value) <= parse_rate(covered.max)


def _within_durations(value: str, covered: DurationRange) -> bool:
    return parse_duration(covered.min) <= parse_duration(value) <= parse_duration(covered.max)


def card_problems(card: ModelCard, link: BorderLinkSpec) -> list[str]:
    """What of ``link`` the card does not cover (empty: the model may run there)."""
    problems = []
    wanted = link.controller.model
    if wanted != card.congestion_control:
        problems.append(
            f"the model is for {card.congestion_control} DTNs; spec.controller.model is "
            f"{wanted or 'unset'}"
        )
    if not _within_rates(link.capacity, card.capacity):
        problems.append(
            f"spec.capacity {format_rate(parse_rate(link.capacity))} is outside the card's "
            f"{card.capacity.min}..{card.capacity.max}"
        )
    if parse_duration(link.sample_time) != parse_duration(card.sample_time):
        problems.append(
            f"spec.sampleTime {link.sample_time} differs from the card's {card.sample_time}"
        )
    desired = link.controller.desired_state
    for name, value, covered in (
        ("dtnRtt", desired.dtn_rtt, card.dtn_rtt),
        ("campusRtt", desired.campus_rtt, card.campus_rtt),
    ):
        if value is not None and not _within_durations(value, covered):
            problems.append(
                f"spec.controller.desiredState.{name} {value} is outside the card's "
                f"{covered.min}..{covered.max}"
            )
    return problems

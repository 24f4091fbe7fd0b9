"""A custom inverse model's card (scidmz.api.model_card) against the link it is meant for,
the shipped models' cards, and where the controller finds a custom model."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from pydantic import ValidationError

from scidmz.api.link import parse_link_spec
from scidmz.api.model_card import CardError, card_problems, parse_card
from scidmz.api.runtime import resolve_runtime_config
from scidmz.control.settings import MODEL_DIR
from scidmz.k8s.manifests import (
    MODEL_MOUNT,
    LinkRef,
    LinkWorkloads,
    WorkloadSettings,
    build_controller_deployment,
)
from tests.loops import link_spec

REPO = Path(__file__).parents[2]
CARD = (REPO / "models" / "cubic" / "card.yaml").read_text()


def _link(**changes: object) -> dict:
    spec = copy.deepcopy(link_spec())
    spec["controller"] = {
        "model": "cubic",
        "modelRef": {"configMapName": "campus-model"},
        **changes,
    }
    return spec


def test_the_shipped_models_cards_cover_the_paper_testbed_only():
    for cca in ("cubic", "bbr"):
        card = parse_card((REPO / "models" / cca / "card.yaml").read_text())
        assert card.congestion_control == cca and card.sample_time == "1s"
        assert (card.capacity.min, card.capacity.max) == ("1Gbps", "1Gbps")
        assert card.command is not None and f"--cca {cca}" in card.command
    assert card_problems(parse_card(CARD), parse_link_spec(_link())) == []


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"capacity": "10Gbps"}, "spec.capacity 10Gbps is outside the card's 1Gbps..1Gbps"),
        ({"sampleTime": "500ms"}, "spec.sampleTime 500ms differs from the card's 1s"),
    ],
)
def test_a_link_outside_the_card_is_named_field_by_field(change, says):
    spec = {**_link(), **change}
    assert card_problems(parse_card(CARD), parse_link_spec(spec)) == [says]


def test_the_congestion_control_and_an_explicit_desired_rtt_must_be_covered():
    spec = _link(model="bbr", desiredState={"dtnRtt": "40ms"})
    problems = card_problems(parse_card(CARD), parse_link_spec(spec))
    assert problems == [
        "the model is for cubic DTNs; spec.controller.model is bbr",
        "spec.controller.desiredState.dtnRtt 40ms is outside the card's 100ms..100ms",
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("- a list", "not a mapping"),
        ("kind: InverseModelCard\ncongestionControl: reno\n", "congestionControl"),
        ("{unclosed", "not YAML"),
        ("x" * 70_000, "larger than"),
    ],
)
def test_a_card_that_cannot_be_read_says_why(text, says):
    with pytest.raises(CardError, match=says):
        parse_card(text)


def test_a_model_ref_needs_the_congestion_control_it_was_made_for():
    spec = _link()
    del spec["controller"]["model"]
    with pytest.raises(ValidationError, match=r"modelRef needs spec\.controller\.model"):
        parse_link_spec(spec)
    with pytest.raises(ValidationError, match="modelRef needs"):
        parse_link_spec(_link(strategy="pi"))


def test_the_controller_mounts_the_configmap_and_reads_the_model_from_it():
    config = resolve_runtime_config(
        "campus-border", 1, parse_link_spec(_link()), [], "collector:9000", model_digest="ab" * 32
    )
    assert config.controller.inverse_model_config_map == "campus-model"
    assert config.controller.inverse_model_digest == "ab" * 32
    deployment = build_controller_deployment(
        LinkRef("campus-border", "1"),
        config,
        WorkloadSettings(image="scidmz:test", namespace="scidmz-system"),
        LinkWorkloads(),
    )
    pod = deployment["spec"]["template"]["spec"]
    assert {"name": "model", "configMap": {"name": "campus-model"}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "model", "mountPath": MODEL_MOUNT, "readOnly": True} in mounts
    assert Path(MODEL_MOUNT) == MODEL_DIR  # where the controller looks
    # a new model (another digest) restarts the controller; the image's model does not
    other = resolve_runtime_config(
        "campus-border", 1, parse_link_spec(_link()), [], "collector:9000", model_digest="cd" * 32
    )
    again = build_controller_deployment(
        LinkRef("campus-border", "1"), other,
        WorkloadSettings(image="scidmz:test", namespace="scidmz-system"), LinkWorkloads(),
    )  # fmt: skip
    hash_of = lambda d: d["spec"]["template"]["metadata"]["annotations"]  # noqa: E731
    assert hash_of(again) != hash_of(deployment)

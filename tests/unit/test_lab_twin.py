"""The twin set up as a lab case ran, and its calibration variants (scidmz.lab.twin)."""

import pytest

from scidmz.lab.twin import SHIPPED, Variant, lab_starts, parse_variant, variant_scenario
from scidmz.netsim.scenario import parse_scenario

CASE = {
    "campus": {"long_flows": 10, "base_rtt_s": 0.01},
    "dtn": {"streams": 8, "base_rtt_s": 0.1},
}


def test_lab_starts_follow_iperf3s_set_up():
    started = lab_starts(CASE)
    assert started["campus"]["start_s"] == pytest.approx(13 * 0.01)
    assert started["dtn"]["start_s"] == pytest.approx(11 * 0.1)
    assert "start_s" not in CASE["dtn"]  # the case's own scenario is left alone


def test_a_variant_sets_each_of_its_switches_and_nothing_else():
    shipped = variant_scenario(CASE, SHIPPED)
    assert shipped == CASE and shipped is not CASE
    every = variant_scenario(
        CASE, Variant(hystart=True, prr=True, bbr_recovery=True, lab_starts=True)
    )
    scenario = parse_scenario(every)
    assert scenario.cubic_hystart and scenario.proportional_rate_reduction
    assert scenario.bbr_loss_recovery
    assert scenario.dtn.start_s == pytest.approx(1.1)
    only_prr = parse_scenario(variant_scenario(CASE, Variant(prr=True)))
    assert only_prr.proportional_rate_reduction and not only_prr.cubic_hystart
    assert not only_prr.bbr_loss_recovery
    assert only_prr.dtn.start_s == 0.0


def test_variants_parse_from_their_names_and_name_themselves_back():
    assert parse_variant("shipped") == SHIPPED
    assert parse_variant("prr") == Variant(prr=True)
    variant = parse_variant("lab-starts+hystart")
    assert variant == Variant(hystart=True, lab_starts=True)
    assert variant.parts == ["hystart", "lab-starts"]  # a fixed order, whatever was given
    assert parse_variant("bbr-recovery+prr").parts == ["prr", "bbr-recovery"]


@pytest.mark.parametrize("text", ["", "fast", "prr+", "hystart+nope"])
def test_an_unknown_switch_is_refused_by_name(text):
    with pytest.raises(ValueError, match="unknown twin variant") as error:
        parse_variant(text)
    assert "hystart, prr, bbr-recovery, lab-starts" in str(error.value)

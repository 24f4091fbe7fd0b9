"""Which DTN hosts keep their shaper after their policy went (scidmz.api.holds), and the
loop a held host renders: its agent kept at the administrators' fail-safe, the controller
leaving the cap alone, nothing that would roll a pod."""

from __future__ import annotations

import datetime as dt

from scidmz.api.holds import held_dtn_hosts
from scidmz.api.link import AdmittedPolicy, HeldDtnHost, HostPortAllocation, parse_link_spec
from scidmz.api.runtime import resolve_runtime_config, restart_relevant
from scidmz.control.live_config import plan_reload
from scidmz.control.settings import controller_settings
from scidmz.k8s.manifests import LinkRef, LinkWorkloads, WorkloadSettings, build_children
from tests.loops import link_spec, loop, policy_spec

NOW = dt.datetime(2026, 6, 1, 12, 0, 0, tzinfo=dt.UTC)
GRACE_S = 600.0


def _link(failsafe_rate="target"):
    spec = link_spec()
    spec["dtnHosts"][0]["shaper"] = {
        "type": "tc",
        "tc": {"nodeName": "dtn-1", "interface": "ens1f0"},
        "failsafeRate": failsafe_rate,
    }
    return spec


def _plan(target="600Mbps"):
    return [AdmittedPolicy(namespace="physics", name="p", dtn_host="dtn-1", target_rate=target)]


def test_a_host_whose_policy_went_is_held_at_the_target_last_admitted():
    held = held_dtn_hosts(parse_link_spec(_link()), [], _plan(), [], NOW, GRACE_S)
    assert held == [HeldDtnHost(host="dtn-1", since="2026-06-01T12:00:00.000000Z",
                                failsafe_rate="600Mbps")]  # fmt: skip
    # an explicit fail-safe rate is the administrators', whatever was admitted
    explicit = held_dtn_hosts(parse_link_spec(_link("250Mbps")), [], _plan(), [], NOW, GRACE_S)
    assert explicit[0].failsafe_rate == "250Mbps"


def test_a_hold_lasts_the_grace_and_ends_when_a_policy_is_admitted():
    link = parse_link_spec(_link())
    held = held_dtn_hosts(link, [], _plan(), [], NOW, GRACE_S)
    later = NOW + dt.timedelta(seconds=GRACE_S - 1)
    assert held_dtn_hosts(link, held, [], [], later, GRACE_S) == held
    over = NOW + dt.timedelta(seconds=GRACE_S)
    assert held_dtn_hosts(link, held, [], [], over, GRACE_S) == []
    assert held_dtn_hosts(link, held, [], ["dtn-1"], later, GRACE_S) == []
    # a grace of 0 holds nothing
    assert held_dtn_hosts(link, [], _plan(), [], NOW, 0.0) == []


def test_hosts_without_a_tc_shaper_are_never_held():
    assert held_dtn_hosts(parse_link_spec(link_spec()), [], _plan(), [], NOW, GRACE_S) == []


def _config(held=(), policies=True):
    file = loop(_link(), policy_spec())
    return resolve_runtime_config(
        file.link_name, 1, file.link, file.policies if policies else (), "collector:1",
        "campus-border-dtn-shaper-dtn-1:9503", None, held,
    )  # fmt: skip


def test_a_held_host_keeps_its_shaper_and_class_and_rolls_nothing():
    admitted = _config()
    hold = [HeldDtnHost(host="dtn-1", since="2026-06-01T12:00:00.000000Z",
                        failsafe_rate="600Mbps")]  # fmt: skip
    held = _config(hold, policies=False)
    dtn = held.actuator.dtn
    assert dtn is not None and dtn.held
    assert dtn.failsafe_rate_bps == dtn.min_rate_bps == 600e6
    assert held.dtn_prefixes == admitted.dtn_prefixes and held.target_rate_bps == 0
    for component in ("collector", "controller", "dtn-shaper"):
        assert restart_relevant(held, component) == restart_relevant(admitted, component)
    # the running controller takes the hold live, and decides no cap while it lasts
    update = plan_reload(admitted, controller_settings(admitted), held)
    assert update.needs_restart == ()
    assert update.settings.dtn is not None and update.settings.dtn.held
    # the same shaper workload, pod template and all
    ref, settings = LinkRef("campus-border", "uid"), WorkloadSettings(image="img")
    ports = (HostPortAllocation(workload="dtn-shaper-dtn-1", node="dtn-1", port=9502),)

    def shaper(config):
        objects = build_children(ref, config, settings, LinkWorkloads(host_ports=ports))
        return next(o for o in objects if o["metadata"]["name"] == "campus-border-dtn-shaper-dtn-1")

    assert shaper(held)["spec"] == shaper(admitted)["spec"]

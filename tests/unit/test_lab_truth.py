"""The lab's pure parts: its topology commands, the scenario checks, the kernel-truth parsers."""

from __future__ import annotations

import ipaddress
import itertools
import math
import re
from dataclasses import replace

import pytest

from scidmz.contract.tbf import tbf_size
from scidmz.lab import topology
from scidmz.lab.topology import LabError
from scidmz.lab.truth import TcpFlow, class_truth, parse_ss, qdisc_stats
from scidmz.netsim.scenario import Scenario

# Captured from the lab (`ss -tinH dst 10.71.4.2`), shortened.
SS_OUTPUT = (
    "ESTAB 0      0       10.71.3.1:39058 10.71.4.2:5201\n"
    "\t bbr wscale:10,10 rto:304 rtt:100.267/28.213 ato:40 mss:1448 cwnd:13 bytes_sent:185"
    " bytes_acked:186 segs_out:9 data_segs_out:3 minrtt:100.196\n"
    "ESTAB 0      2959104 10.71.3.1:39070 10.71.4.2:5201\n"
    "\t cubic wscale:10,10 rto:304 rtt:101.534/0.959 mss:1448 cwnd:1840 ssthresh:1840"
    " bytes_sent:13553301 bytes_retrans:36200 bytes_acked:11065638 data_segs_out:9362"
    " unacked:1693 retrans:0/25 minrtt:100.05\n"
)


def test_ss_lines_become_flows_with_si_units() -> None:
    control, data = parse_ss(SS_OUTPUT)
    assert control.congestion_control == "bbr" and control.peer_port == 5201
    assert data.congestion_control == "cubic"
    assert data.rtt_s == pytest.approx(0.101534)
    assert data.min_rtt_s == pytest.approx(0.10005)
    assert (data.cwnd_segments, data.bytes_acked, data.data_segments_out) == (1840, 11065638, 9362)
    assert data.retransmitted_segments == 25 and control.retransmitted_segments == 0


# Captured from `ss -tinH` on this host (iperf3 with BBR over loopback), shortened.
SS_BBR = (
    "ESTAB 0      0      127.0.0.1:51926 127.0.0.1:5299\n"
    "\t bbr wscale:10,10 rto:204 rtt:0.051/0.052 mss:65483 cwnd:18 bytes_acked:37617702"
    " data_segs_out:864 bbr:(bw:261932000000bps,mrtt:0.002,pacing_gain:2.88672,"
    "cwnd_gain:2.88672) send 184893176471bps pacing_rate 1497102688120bps"
    " delivery_rate 174621333328bps delivered:865 minrtt:0.002\n"
)


def test_ss_gives_bbrs_estimates_and_the_kernels_rates() -> None:
    (flow,) = parse_ss(SS_BBR)
    assert flow.bbr_bandwidth_bps == 261932000000.0
    assert flow.bbr_min_rtt_s == pytest.approx(2e-6)
    assert flow.bbr_pacing_gain == pytest.approx(2.88672)
    assert flow.pacing_rate_bps == 1497102688120.0
    assert flow.delivery_rate_bps == 174621333328.0  # not the "send" rate before it


def test_a_cubic_flow_has_no_bbr_estimates_and_units_scale() -> None:
    (_, cubic) = parse_ss(SS_OUTPUT)
    assert math.isnan(cubic.bbr_bandwidth_bps) and math.isnan(cubic.bbr_pacing_gain)
    assert math.isnan(cubic.delivery_rate_bps)  # not printed in that capture
    (scaled,) = parse_ss(SS_BBR.replace("delivery_rate 174621333328bps", "delivery_rate 12.5Mbps"))
    assert scaled.delivery_rate_bps == pytest.approx(12.5e6)


def _flow(local: str, acked: int, segments: int, retrans: int = 0, rtt_s: float = 0.1) -> TcpFlow:
    return TcpFlow(local, "10.71.4.2:5201", "cubic", rtt_s, 0.1, 100, acked, segments, retrans)


def test_class_truth_is_the_difference_of_two_snapshots() -> None:
    before = {"a": _flow("a", 1_000_000, 1000, 2), "b": _flow("b", 0, 5)}
    now = [_flow("a", 3_500_000, 2700, 7, rtt_s=0.12), _flow("b", 10, 8), _flow("c", 125_000, 90)]
    truth = class_truth(now, before, 0.5, "dtn", packets_threshold=10)
    # (2.5 MB + 10 B + 125 kB) in 0.5 s
    assert truth["dtn_rate_bps"] == pytest.approx((2_500_000 + 10 + 125_000) * 8 / 0.5)
    assert truth["dtn_retransmitted_segments"] == 5
    # b sent 3 segments (an idle control connection): below C_TH, not active
    assert truth["dtn_active_flows"] == 2
    assert truth["dtn_rtt_s"] == pytest.approx((0.12 + 0.1) / 2)


def test_a_class_without_flows_reports_zero_rate_and_no_rtt() -> None:
    truth = class_truth([], {}, 1.0, "campus")
    assert truth["campus_rate_bps"] == 0 and truth["campus_active_flows"] == 0
    assert math.isnan(truth["campus_rtt_s"])


def test_qdisc_stats_read_the_root_tbf() -> None:
    text = (
        '[{"kind":"tbf","handle":"8011:","root":true,"options":{"rate":37500000},'
        '"bytes":431378670,"drops":47,"backlog":1968200,"qlen":59}]'
    )
    stats = qdisc_stats(text)
    assert stats == {
        "rate_bps": 300e6,
        "backlog_bytes": 1968200.0,
        "drops": 47.0,
        "sent_bytes": 431378670.0,
    }


def test_the_bottleneck_queue_is_the_scenarios_buffer() -> None:
    scenario = Scenario.model_validate(
        {
            "bottleneck": {"capacity_bps": "300Mbps", "buffer_s": "50ms"},
            "dtn": {"rate_limit_bps": "100Mbps"},
        }
    )
    commands = topology.build_commands(scenario)
    bottleneck = next(
        c for c in commands if c[:6] == ["tc", "-n", topology.BORDER, "qdisc", "add", "dev"]
    )
    assert bottleneck[bottleneck.index("rate") + 1] == "300000000bit"
    assert bottleneck[bottleneck.index("limit") + 1] == str(int(0.05 * 300e6 / 8))
    # the same buffer as a named bfifo under it, so that its limit can change at run time
    fifo = commands[commands.index(bottleneck) + 1]
    assert fifo[fifo.index("parent") :] == [
        "parent", "1:1", "handle", "10:", "bfifo", "limit", str(int(0.05 * 300e6 / 8))
    ]  # fmt: skip
    dtn_cap = next(c for c in commands if c[:3] == ["tc", "-n", topology.DTN])
    assert dtn_cap[dtn_cap.index("rate") + 1] == "100000000bit"
    assert topology.delay_routes(scenario) == ["10.71.3.0/24=100000", "10.71.1.0/24=10000"]


def test_the_lab_shapes_as_the_actuator_does_and_tunes_the_dtn_like_a_dtn() -> None:
    scenario = Scenario.model_validate(
        {"shaper": {"initial_rate_bps": "150Mbps"}, "dtn": {"rate_limit_bps": "100Mbps"}}
    )
    commands = topology.build_commands(scenario)
    shaper = next(c for c in commands if c[:3] == ["tc", "-n", topology.SHAPER])
    size = tbf_size(150e6)
    assert shaper[shaper.index("burst") + 1] == str(size.burst_bytes)
    assert shaper[shaper.index("limit") + 1] == str(size.limit_bytes)
    cap = next(c for c in commands if c[:3] == ["tc", "-n", topology.DTN])
    assert cap[cap.index("burst") + 1] == str(tbf_size(100e6).burst_bytes)
    # a 4 MB send buffer would cap each DTN stream near 1.8 MB in flight at 1 Gb/s
    sysctls = [c[-1] for c in commands if c[:2] == ["ip", "netns"] and "sysctl" in c]
    assert f"net.ipv4.tcp_wmem={topology.DTN_SOCKET_BUFFER}" in sysctls
    assert f"net.ipv4.tcp_rmem={topology.DTN_SOCKET_BUFFER}" in sysctls
    assert int(topology.DTN_SOCKET_BUFFER.split()[-1]) >= 64 * 2**20
    assert f"net.ipv4.tcp_min_tso_segs={topology.LAB_MIN_TSO_SEGMENTS}" in sysctls


def test_each_dtn_host_has_its_own_namespace_network_receiver_delay_and_cap() -> None:
    scenario = Scenario.model_validate(
        {
            "dtn": {"name": "climate", "base_rtt_s": "100ms", "rate_limit_bps": "300Mbps"},
            "more_dtns": [
                {"name": "genomics", "base_rtt_s": "50ms", "start_s": "60s", "stop_s": "120s"},
                {"name": "physics", "base_rtt_s": "80ms", "congestion_control": "bbr",
                 "rate_limit_bps": "150Mbps"},
            ],
        }
    )  # fmt: skip
    topology.check_scenario(scenario)  # a DTN that starts and stops late is the lab's too
    sites = topology.dtn_sites(scenario)
    assert [s.name for s in sites] == ["climate", "genomics", "physics"]
    assert sites[0] == replace(topology.FIRST_DTN, name="climate")  # the testbed's, as before
    assert [s.namespace for s in sites] == ["sdl-dtn", "sdl-dtn2", "sdl-dtn3"]
    assert topology.namespaces(scenario) == (*topology.NAMESPACES, "sdl-dtn2", "sdl-dtn3")
    # each its own sender network, receiver and port, the receivers inside the campus /24
    assert len({s.net for s in sites}) == len({s.receiver for s in sites}) == 3
    assert len({s.port for s in sites} | {topology.CAMPUS_PORT}) == 4
    remote = ipaddress.ip_network(topology.CAMPUS_REMOTE_PREFIX)
    assert all(ipaddress.ip_address(s.receiver) in remote for s in sites)
    assert all(ipaddress.ip_address(s.sender) in ipaddress.ip_network(s.net) for s in sites)
    # ACKs to each host held its own RTT; the tap reads every host's link as the DTN port
    assert topology.delay_routes(scenario) == [
        "10.71.3.0/24=100000", "10.71.11.0/24=50000", "10.71.12.0/24=80000", "10.71.1.0/24=10000"
    ]  # fmt: skip
    assert topology.tap_interfaces(scenario)["dtn"] == ["bd", "bd2", "bd3"]
    commands = topology.build_commands(scenario)
    created = [c[3] for c in commands if c[:3] == ["ip", "netns", "add"]]
    assert created == list(topology.namespaces(scenario))
    veths = [(c[2], c[5], c[10], c[12]) for c in commands if "veth" in c]
    assert ("sdl-dtn3", "d0", "bd3", topology.BORDER) in veths
    receivers = [c[5] for c in commands if c[:5] == ["ip", "-n", topology.RECV, "addr", "add"]]
    assert {f"{s.receiver}/24" for s in sites} <= set(receivers)
    back = [c for c in commands if c[:3] == ["ip", "-n", topology.RECV] and "route" in c]
    assert {c[5] for c in back} == {topology.CAMPUS_NET, *(s.net for s in sites)}
    caps = {c[2]: c[c.index("rate") + 1] for c in commands if c[:2] == ["tc", "-n"]
            and c[2].startswith(topology.DTN)}  # fmt: skip
    assert caps == {"sdl-dtn": "300000000bit", "sdl-dtn3": "150000000bit"}  # genomics uncapped
    sysctls = [(c[3], c[-1]) for c in commands if "sysctl" in c]
    for site in sites:  # every DTN host tuned as a DTN
        assert (site.namespace, f"net.ipv4.tcp_wmem={topology.DTN_SOCKET_BUFFER}") in sysctls


def test_a_late_dtn_sends_from_its_start_to_its_stop(tmp_path) -> None:
    from scidmz.lab.traffic import client_argv, senders

    scenario = Scenario.model_validate(
        {"more_dtns": [{"name": "genomics", "start_s": "60s", "stop_s": "120s"}]}
    )
    first, late, campus = senders(scenario)
    assert (first.name, late.name, campus.name) == ("dtn", "genomics", "campus")
    assert late.namespace == "sdl-dtn2" and late.receiver == "10.71.4.11"
    argv = client_argv(scenario, 180.0, late, tmp_path / "g.json")
    assert argv[argv.index("--time") + 1] == "60"  # from 60 s to 120 s
    assert argv[argv.index("--client") + 1] == late.receiver
    assert argv[argv.index("--port") + 1] == str(late.port) != str(first.port)
    cut = client_argv(scenario, 100.0, late, tmp_path / "g.json")  # the recording ends first
    assert cut[cut.index("--time") + 1] == "40"


def test_the_recorded_scenario_says_how_the_lab_sent() -> None:
    assert topology.as_built(Scenario()).min_tso_segments == topology.LAB_MIN_TSO_SEGMENTS
    assert topology.as_built(Scenario(), offloads=False).min_tso_segments == 1


def test_every_namespace_is_created_before_it_is_used() -> None:
    commands = topology.build_commands(Scenario())
    created = [c[3] for c in commands if c[:3] == ["ip", "netns", "add"]]
    assert created == list(topology.NAMESPACES)
    first_use = len(created)
    assert all(c[:3] != ["ip", "netns", "add"] for c in commands[first_use:])


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"dtn": {"congestion_control": "bbr2"}}, "dtn.congestion_control"),
        ({"campus": {"short_flows": {"enabled": True}}}, "campus.short_flows.enabled"),
        ({"campus": {"long_flows": 200}}, "campus.long_flows"),
        ({"dtn": {"transfer_bytes": "10GB", "transfer_split": "static"}}, "dtn.transfer_split"),
        ({"dtn": {"transfer_bytes": "1GB", "start_s": "1s"}}, "dtn: a lab transfer"),
        (
            {"more_dtns": [{"name": "b", "congestion_control": "bbr2"}]},
            "more_dtns[0].congestion_control",
        ),
        ({"more_dtns": [{"name": "campus"}]}, "more_dtns[0].name"),
        ({"more_dtns": [{"name": f"d{k}"} for k in range(4)]}, "more_dtns: the lab holds"),
        ({"campus": {"start_s": "1s"}}, "campus.start_s"),
    ],
)
def test_scenarios_the_lab_cannot_build_are_refused_by_field(
    raw: dict[str, object], field: str
) -> None:
    with pytest.raises(LabError, match=re.escape(field)):
        topology.check_scenario(Scenario.model_validate(raw))


def _rows(values: dict[str, list[float | None]], t0: float = 1.0) -> list[dict[str, object]]:
    length = len(next(iter(values.values())))
    return [
        {"t_s": f"{t0 + i:.3f}"}
        | {key: "" if series[i] is None else str(series[i]) for key, series in values.items()}
        for i in range(length)
    ]


def test_settled_at_is_the_start_of_the_last_run_within_tolerance() -> None:
    from scidmz.lab.loop import settled_at

    # an EWMA converging on the kernel's 109 ms, with one wide second in the middle
    collector = _rows({"campus_rtt_s": [0.082, 0.100, 0.1085, 0.095, 0.1083, 0.1089, 0.1090]})
    kernel = _rows({"campus_rtt_at_tap_s": [0.109] * 7}, t0=1.02)
    close = lambda c, k: abs(c - k) <= 0.002  # noqa: E731
    assert settled_at(collector, kernel, "campus_rtt_s", close) == 5.0
    # a last second out of tolerance: never settled
    wide = _rows({"campus_rtt_s": [0.109, 0.109, 0.080]})
    assert math.isnan(settled_at(wide, kernel, "campus_rtt_s", close))
    # seconds the collector has no value for are skipped, not counted as misses
    gappy = _rows({"campus_rtt_s": [0.080, None, 0.109]})
    assert settled_at(gappy, kernel, "campus_rtt_s", close) == 3.0


def test_active_flows_are_judged_against_both_classes_sum() -> None:
    from scidmz.lab.loop import settled_at, summarise

    samples = _rows({"active_flows": [59.0, 60.0, 60.0], "dtn_rate_bps": [1e8, 1e8, 1e8]})
    truth = _rows(
        {"dtn_active_flows": [8.0, 8.0, 8.0], "campus_active_flows": [51.0, 52.0, 52.0]}
        | {"dtn_rate_bps": [1e8, 1e8, 1e8]}
    )
    exact = lambda c, k: c == k  # noqa: E731
    assert settled_at(samples, truth, "active_flows", exact) == 1.0
    summary = summarise(samples, truth, lambda _: 1e8, warmup_s=2.0)
    assert summary["accuracy"]["active_flows"] == {"collector": 60.0, "kernel": 60.0}


def test_tracking_is_judged_against_the_target_of_each_second() -> None:
    """R*(t) from a per-second schedule: second k's rate against the target set at its end
    (as the simulator's loop pairs them); a constant target would call this run 25 % off."""
    from scidmz.lab.loop import schedule_lookup, summarise

    delivered = [3e8, 3e8, 3e8, 5e8, 5e8]
    samples = _rows({"dtn_rate_bps": delivered})
    truth = _rows({"dtn_rate_bps": delivered}, t0=1.0)
    steps = schedule_lookup([3e8, 3e8, 3e8, 3e8, 5e8, 5e8])
    summary = summarise(samples, truth, steps, warmup_s=0.0)
    assert summary["mrae_delivered"] == 0.0
    assert summary["target_rate_bps"] == 3.8e8
    assert summarise(samples, truth, lambda _: 3.8e8, warmup_s=0.0)["mrae_delivered"] > 0.2
    # past its end, a schedule holds its last level
    assert steps(60.0) == 5e8


def test_a_finite_dtn_transfer_sends_its_bytes_and_the_campus_its_duration(tmp_path) -> None:
    from scidmz.lab.traffic import client_argv, senders, transfer_margin_bytes

    scenario = Scenario.model_validate({"dtn": {"transfer_bytes": "10GB"}})
    topology.check_scenario(scenario)  # pooled, as iperf3 -n sends it: the lab takes it
    first, campus_sender = senders(scenario)
    dtn = client_argv(scenario, 170.0, first, tmp_path / "dtn.json")
    # + 2 s at B = 1 Gb/s: the streams outlive the 10 GB crossing by a whole truth row
    assert transfer_margin_bytes(scenario) == 250e6
    assert dtn[dtn.index("--bytes") + 1] == str(int(10e9 + 250e6))
    assert "--time" not in dtn
    assert dtn[dtn.index("--parallel") + 1] == "8"
    campus = client_argv(scenario, 170.0, campus_sender, tmp_path / "campus.json")
    assert campus[campus.index("--time") + 1] == "170" and "--bytes" not in campus
    endless = client_argv(Scenario(), 12.5, senders(Scenario())[0], tmp_path / "dtn.json")
    assert endless[endless.index("--time") + 1] == "13" and "--bytes" not in endless
    # the shipped example is such a scenario, at the paper's scale
    from pathlib import Path

    from scidmz.lab.scenario import lab_scenario

    example = lab_scenario(
        Path(__file__).parents[2] / "examples" / "lab" / "transfer-10GB.yaml", {}
    )
    topology.check_scenario(example)
    assert example.dtn.transfer_bytes == 10e9 and example.bottleneck.capacity_bps == 1e9
    assert example.campus.long_flows == 100 and example.dtn.streams == 8


def test_a_transfers_fct_is_when_the_acknowledged_bytes_cross_its_size() -> None:
    from scidmz.lab.loop import summarise, transfer_fct_s

    # 1 s rows of acknowledged DTN bytes (as rates): 50, 100, 100, 100, then 25 MB, 0
    rates = [4e8, 8e8, 8e8, 8e8, 2e8, 0.0]
    truth = _rows({"dtn_rate_bps": rates})
    assert transfer_fct_s(truth, 50e6) == pytest.approx(1.0)
    assert transfer_fct_s(truth, 200e6) == pytest.approx(2.5)  # half-way through second 3
    assert transfer_fct_s(truth, 375e6) == pytest.approx(5.0)
    assert math.isnan(transfer_fct_s(truth, 376e6))  # never delivered
    # a second without a reading adds nothing (rather than failing the run)
    gappy = _rows({"dtn_rate_bps": [4e8, None, 8e8]})
    assert transfer_fct_s(gappy, 100e6) == pytest.approx(2.5)
    # the summary judges the seconds the transfer ran, not the idle tail after it
    samples = _rows({"dtn_rate_bps": rates})
    summary = summarise(samples, truth, lambda _: 8e8, warmup_s=0.0, transfer_bytes=200e6)
    assert summary["fct_s"] == pytest.approx(2.5)
    assert summary["mean_dtn_delivered_bps"] == pytest.approx(6e8)  # seconds 1-2
    assert summary["samples"] == 2
    endless = summarise(samples, truth, lambda _: 8e8, warmup_s=0.0)
    assert math.isnan(endless["fct_s"]) and endless["samples"] == 6


def test_a_target_schedule_the_api_would_refuse_is_refused_before_the_loop_starts(
    tmp_path,
) -> None:
    import types
    from pathlib import Path

    from scidmz.lab.loop import load_loop, run_loop
    from scidmz.lab.scenario import lab_scenario

    policy = load_loop(Path(__file__).parents[2] / "examples" / "lab" / "cubic-1G.yaml")
    lab = types.SimpleNamespace(scenario=lab_scenario(None, {"bottleneck.capacity_bps": "1Gbps"}))
    with pytest.raises(LabError, match="1200000000 bit/s is no target here"):
        run_loop(policy, lab, 10.0, tmp_path, targets_bps=[6e8, 1.2e9])  # type: ignore[arg-type]
    assert not (tmp_path / "logs").exists()  # no process was started


def test_a_dtn_host_is_judged_on_its_own_admitted_time_byte_for_byte() -> None:
    from scidmz.lab.loop import host_summary

    # dtn-2 admitted from 4 s to 12 s; the kernel's seconds (rates over [t-1, t]) dip at
    # 11 s; the collector measures 0.3 s after each second, over its own interval
    kernel = {t: (25e6 if 5 <= t < 12 else 0.0) for t in range(1, 16)}
    kernel[11] = 15e6
    truth = [
        {"t_s": float(t), "host_dtn-2_rate_bps": k * 0.98, "host_dtn-2_offered_rate_bps": k}
        for t, k in kernel.items()
    ]

    def seen(t: int) -> float:  # what crossed the link over [t - 0.7, t + 0.3]
        return 0.7 * kernel[t] + 0.3 * kernel.get(t + 1, 0.0)

    samples = [
        {"t_s": t + 1.01, "measured_t_s": t + 0.3, "sequence": t, "host_dtn-2_rate_bps":
         seen(t) * 1.001}
        for t in range(1, 15)
    ]  # fmt: skip
    del samples[8]  # the /state reads missed sample 9: the intervals 8-9 and 9-10 are unknown
    target = lambda host, t: 25e6 if host == "dtn-2" and 4 <= t < 12 else None  # noqa: E731
    judged = host_summary(samples, truth, "dtn-2", target, warmup_s=2.0)
    # the intervals from 6.3 s (2 s after its admission) to 11.3 s, but the two around the
    # missed sample; not the one that ends after the policy went (11.3 s -> 12.3 s)
    assert judged["seconds"] == pytest.approx(3.0)
    assert judged["rate_error"] == pytest.approx(0.001)
    # 6.3-7.3 and 7.3-8.3 at 25 Mb/s, 10.3-11.3 holds 0.7 s of the dip and 0.3 s of nothing
    assert judged["kernel_offered_rate_bps"] == pytest.approx((25e6 + 25e6 + 0.7 * 15e6) / 3)
    assert judged["target_rate_bps"] == 25e6
    assert judged["mrae_delivered"] == pytest.approx(
        (5 * abs(24.5e6 - 25e6) + abs(14.7e6 - 25e6)) / 6 / 25e6
    )
    # a host never admitted is judged on nothing
    assert math.isnan(host_summary(samples, truth, "dtn-3", target, 2.0)["rate_error"])


def test_with_a_tap_clock_each_sample_is_judged_on_the_interval_it_covers() -> None:
    from scidmz.lab.loop import covered_intervals, host_summary, tap_epoch_s

    # the kernel's link counters read 0.12 s late each second (links_t_s), 20 Mb/s then 30
    truth = [
        {"t_s": float(t), "links_t_s": t + 0.12, "host_dtn-2_rate_bps": 0.0,
         "host_dtn-2_offered_rate_bps": 20e6 if t <= 8 else 30e6}
        for t in range(1, 14)
    ]  # fmt: skip
    # the tap counted up to 0.25 s before each read, over intervals of 0.9-1.1 s; the /state
    # reads missed sample 5, which does not matter: each sample says what it covers
    ends = [2.37, 3.27, 4.37, 5.37, 6.47, 7.37, 8.27, 9.37, 10.37]
    samples = []
    for sequence, (start, end) in enumerate(itertools.pairwise([1.37, *ends]), start=1):
        bits = sum(  # what crossed the link in (start, end], by the kernel's seconds
            (20e6 if s <= 8 else 30e6) * max(0.0, min(end, s + 0.12) - max(start, s - 0.88))
            for s in range(1, 14)
        )
        samples.append({"sequence": sequence, "measured_t_s": end + 0.25, "interval_s":
                        end - start, "covered_until_t_s": end, "host_dtn-2_rate_bps":
                        bits / (end - start)})  # fmt: skip
    del samples[4]
    assert [round(a, 2) for a, _, _ in covered_intervals(samples, "host_dtn-2_rate_bps")] == [
        1.37,
        2.37,
        3.27,
        4.37,
        6.47,
        7.37,
        8.27,
        9.37,
    ]
    target = lambda host, t: 25e6 if host == "dtn-2" else None  # noqa: E731
    judged = host_summary(samples, truth, "dtn-2", target, warmup_s=2.0)
    # from 3.27 s (the first interval 2 s after its admission at 1 s), less the missed one
    assert judged["seconds"] == pytest.approx(10.37 - 3.27 - 1.1)
    assert judged["rate_error"] == pytest.approx(0.0, abs=1e-9)
    # the low bits of the kernel's realtime stamp, back as the epoch nearest the read
    epoch_s = 1_795_000_000.123456789
    low = round(epoch_s * 1e9) % 2**48
    assert tap_epoch_s(low, epoch_s + 0.4) == pytest.approx(epoch_s, abs=1e-6)
    assert tap_epoch_s(low, epoch_s - 0.01) == pytest.approx(epoch_s, abs=1e-6)


def test_brs_own_loss_is_signed_so_its_mean_over_seconds_is_unbiased() -> None:
    from scidmz.lab.truth import byte_balance_loss

    assert byte_balance_loss(1000.0, 990.0, 5.0) == pytest.approx(0.005)
    # the backlog read a moment after the link counters: one second errs low, the next high
    seconds = [byte_balance_loss(1000.0, 1000.0, 2.0), byte_balance_loss(1000.0, 996.0, -2.0)]
    assert seconds[0] == pytest.approx(-0.002)
    assert sum(seconds) / 2 == pytest.approx(0.002)  # 4 bytes of 2,000 lost over both
    assert math.isnan(byte_balance_loss(0.0, 0.0, 0.0))
    assert byte_balance_loss(10.0, 100.0, 0.0) == -1.0  # bounded

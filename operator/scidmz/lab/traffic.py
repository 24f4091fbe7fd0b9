"""The lab's long flows: iperf3 servers in the receivers' namespace and one iperf3 client per
class (campus: N flows; DTN: M streams), each with its congestion control set per socket
(``-C``), because a new namespace defaults to bbr and refuses cubic as its default.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scidmz.lab import topology
from scidmz.lab.runner import Lab, _wait_for, spawn
from scidmz.lab.truth import BACKLOG_POLL_S, FLOW_COLUMNS, BacklogMeter, TruthSampler
from scidmz.netsim.scenario import Scenario

MARGIN_AT_CAPACITY_S = 2.0


def transfer_margin_bytes(scenario: Scenario) -> float:
    """What a finite DTN transfer's iperf3 sends beyond ``dtn.transfer_bytes``:
    ``MARGIN_AT_CAPACITY_S`` at the bottleneck's capacity. iperf3 -n ends the test once its
    *writes* reach the total, and the server then closes the streams and resets what is
    still in the senders' buffers (esnet/iperf#1634: 10.3 MB sent, 2.05 MB counted
    received); and a socket gone before the next truth row takes that second's
    acknowledgements with it (a 1 Gb/s lab run counted 9.962 of 10.067 GB with a 64 MiB
    margin). So the lab sends more and times the transfer by the kernel's acknowledged
    bytes crossing ``transfer_bytes`` (`loop.transfer_fct_s`): the margin keeps every
    stream open for at least one whole truth interval after the crossing, however full the
    DTN's (ESnet-tuned) send buffers are."""
    return MARGIN_AT_CAPACITY_S * scenario.bottleneck.capacity_bps / 8


@dataclass(frozen=True)
class Sender:
    """One iperf3 client: the campus's long flows or one DTN host's streams."""

    name: str
    """``campus``, ``dtn`` (the first DTN host) or a further DTN host's name."""
    namespace: str
    receiver: str
    port: int
    flows: int
    congestion_control: str
    start_s: float = 0.0
    stop_s: float | None = None
    transfer_bytes: float | None = None


def senders(scenario: Scenario) -> list[Sender]:
    """Every class's iperf3 client, the DTN hosts first (the first one named ``dtn``, as its
    logs always were), then the campus."""
    dtns = [
        Sender(
            "dtn" if k == 0 else dtn.name,
            site.namespace,
            site.receiver,
            site.port,
            dtn.streams,
            dtn.congestion_control,
            dtn.start_s,
            dtn.stop_s,
            dtn.transfer_bytes,
        )
        for k, (site, dtn) in enumerate(
            zip(topology.dtn_sites(scenario), scenario.dtns, strict=True)
        )
    ]
    campus = scenario.campus
    return [
        *dtns,
        Sender(
            "campus",
            topology.CAMPUS,
            topology.CAMPUS_RECV_ADDR,
            topology.CAMPUS_PORT,
            campus.long_flows,
            campus.congestion_control,
        ),
    ]


def client_argv(scenario: Scenario, duration_s: float, sender: Sender, log: Path) -> list[str]:
    """The iperf3 client of one sender: it sends from its ``start_s`` to its ``stop_s`` or
    the recording's end, or, for a DTN with ``transfer_bytes``, that many bytes in total
    over its streams (+ the margin of :func:`transfer_margin_bytes`)."""
    # iperf3's -n counts the writes of all streams together (esnet/iperf PR #1113): each
    # stream writes whenever its socket takes more, a pool as the twin's pooled split
    end_s = duration_s if sender.stop_s is None else min(duration_s, sender.stop_s)
    extent = (
        ["--bytes", str(int(sender.transfer_bytes + transfer_margin_bytes(scenario)))]
        if sender.transfer_bytes is not None
        else ["--time", str(max(1, math.ceil(end_s - sender.start_s)))]
    )
    return [
        "iperf3", "--client", sender.receiver, "--port", str(sender.port),
        "--parallel", str(sender.flows), "--congestion", sender.congestion_control,
        *extent, "--json", "--logfile", str(log),
    ]  # fmt: skip


def _listening(port: int) -> bool:
    done = subprocess.run(
        ["ip", "netns", "exec", topology.RECV, "ss", "-ltnH", f"sport = :{port}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return bool(done.stdout.strip())


class Flows:
    """The scenario's iperf3 clients: servers first, then each client at its ``start_s``
    (:meth:`at`, called as the recording's seconds pass; a sender due at 0 starts in
    :meth:`start`)."""

    def __init__(self, lab: Lab, duration_s: float, out: Path) -> None:
        self.lab, self.duration_s, self.out = lab, duration_s, out
        self.pending = [s for s in senders(lab.scenario) if s.flows > 0]
        self.clients: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> Flows:
        for sender in self.pending:
            if not _listening(sender.port):
                spawn(
                    topology.RECV,
                    ["iperf3", "--server", "--bind", sender.receiver, "--port", str(sender.port)],
                    self.out / f"iperf3-server-{sender.name}.log",
                )
                _wait_for(
                    lambda port=sender.port: _listening(port),  # type: ignore[misc]
                    5.0,
                    f"the {sender.name} iperf3 server",
                )
        self.at(0.0)
        return self

    def at(self, t_s: float) -> None:
        """Start every client due by ``t_s`` (seconds since the flows started)."""
        due = [s for s in self.pending if s.start_s <= t_s]
        self.pending = [s for s in self.pending if s.start_s > t_s]
        for sender in due:
            log = self.out / f"iperf3-{sender.name}.json"
            log.unlink(missing_ok=True)
            self.clients[sender.name] = spawn(
                sender.namespace,
                client_argv(self.lab.scenario, self.duration_s, sender, log),
                self.out / f"iperf3-{sender.name}.log",
            )

    def transfers(self) -> set[str]:
        """The clients that send a finite transfer (cut when the recording ends)."""
        return {s.name for s in senders(self.lab.scenario) if s.transfer_bytes is not None}


def start_flows(lab: Lab, duration_s: float, out: Path) -> Flows:
    """Servers, then the clients due at once (``Flows.at`` starts the later ones)."""
    return Flows(lab, duration_s, out).start()


def client_summary(log: Path) -> dict[str, float]:
    """Mean sending rate and retransmissions from an iperf3 client's JSON log."""
    report = json.loads(log.read_text())
    if "error" in report:
        raise RuntimeError(f"iperf3 ({log.name}): {report['error']}")
    sent = report["end"]["sum_sent"]
    return {
        "rate_bps": float(sent["bits_per_second"]),
        "retransmits": float(sent.get("retransmits", 0)),
    }


def record_truth(
    lab: Lab,
    duration_s: float,
    out: Path,
    interval_s: float = 1.0,
    on_row: Callable[[dict[str, float]], None] = lambda _: None,
    on_tick: Callable[[float], None] = lambda _: None,
    flows_csv: bool = False,
) -> Path:
    """Run the long flows for ``duration_s`` and write per-interval ground truth to
    ``out/truth.csv`` (and every flow's ``truth.FLOW_COLUMNS`` to ``out/flows.csv``);
    returns its path. Rows come on monotonic deadlines; between them the bottleneck's
    backlog is read every ``BACKLOG_POLL_S`` for the interval's mean queuing delay.
    ``on_tick(t_s)`` runs at 0 and after every row (where ``lab record`` changes u)."""
    out.mkdir(parents=True, exist_ok=True)
    sampler = TruthSampler(
        lab.scenario.bottleneck.capacity_bps,
        lab.scenario.activity.packets_threshold,
        topology.dtn_sites(lab.scenario),
    )
    meter = BacklogMeter(*topology.BOTTLENECK).open()
    try:
        flows = start_flows(lab, duration_s, out)
    except BaseException:
        meter.close()  # the finally below only guards what runs once the flows are up
        raise
    path = out / "truth.csv"
    try:
        start = time.monotonic()
        sampler.sample(interval_s)
        meter.mean.take()
        on_tick(0.0)
        flow_handle = (out / "flows.csv").open("w", newline="") if flows_csv else None
        flow_writer = csv.DictWriter(flow_handle, list(FLOW_COLUMNS)) if flow_handle else None
        if flow_writer is not None:
            flow_writer.writeheader()
        with path.open("w", newline="") as handle:
            writer: csv.DictWriter[str] | None = None
            for tick in range(1, int(duration_s / interval_s) + 1):
                _read_until(meter, start + tick * interval_s)
                t_s = tick * interval_s
                row = {"t_s": t_s} | sampler.sample(interval_s, meter.mean.take())
                row |= delayline_stats(lab)
                if writer is None:
                    writer = csv.DictWriter(handle, fieldnames=list(row))
                    writer.writeheader()
                writer.writerow(row)
                handle.flush()
                if flow_writer is not None:
                    flow_writer.writerows({"t_s": t_s} | flow for flow in sampler.flow_rows())
                on_row(row)
                on_tick(t_s)
                flows.at(t_s)
        if flow_handle is not None:
            flow_handle.close()
        for name, client in flows.clients.items():
            if name in flows.transfers():
                continue  # a transfer unfinished when the recording ends is cut (below)
            client.wait(timeout=15)
    finally:
        meter.close()
        for client in flows.clients.values():
            if client.poll() is None:
                client.terminate()
    return path


def _read_until(meter: BacklogMeter, deadline: float) -> None:
    """Read the backlog every ``BACKLOG_POLL_S`` until the monotonic ``deadline``."""
    while True:
        meter.read()
        left = deadline - time.monotonic()
        if left <= 0.0:
            return
        time.sleep(min(BACKLOG_POLL_S, left))


def delayline_stats(lab: Lab) -> dict[str, float]:
    """The delay line's own counters: a late delay line adds delay (``max_lag_us``)."""
    try:
        stats = json.loads(lab.delay_stats_path.read_text())
    except (OSError, ValueError):
        return {}
    return {
        "delayline_max_lag_s": float(stats["max_lag_us"]) / 1e6,
        "delayline_drops": float(
            stats["dropped_full"] + stats["dropped_oversize"] + stats["kernel_drops"]
        ),
    }

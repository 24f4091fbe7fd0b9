"""ns-3 reference run of a small dumbbell; runs in a throwaway ns-3 environment, not ours.

    python3.11 -m venv /tmp/ns3venv && /tmp/ns3venv/bin/pip install ns3==3.44
    /tmp/ns3venv/bin/python bench/ns3/dumbbell.py --out /tmp/ns3.json

Topology (mirrors ``bench/netsim_vs_ns3.py``): ``campus`` senders with a 10 ms base RTT and
``dtn`` senders with a 100 ms base RTT, each with its own 1 Gb/s access link and receiver,
share one bottleneck router-to-router link with a drop-tail FIFO (ns-3 FifoQueueDisc, the
device queue cut to one packet so the FIFO is the only buffer). TCP Cubic, MSS 1448, IW 10,
SACK, one ACK per segment, 16 MB socket buffers. Per-class goodput comes from the packet
sinks, per-class queuing delay from every packet's sojourn in the FIFO (bytes-weighted, split
by destination network), exactly what the flow-level simulator reports.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ns import ns  # type: ignore[import-not-found]

CPP = r"""
#include "ns3/queue-disc.h"
#include "ns3/ipv4-queue-disc-item.h"
namespace scidmz_bench {
double sojourn_w[2] = {0, 0};
double bytes[2] = {0, 0};
double warmup_s = 0;
void Dequeued(ns3::Ptr<const ns3::QueueDiscItem> item) {
    if (ns3::Simulator::Now().GetSeconds() < warmup_s) return;
    ns3::Ptr<const ns3::Ipv4QueueDiscItem> ip =
        ns3::DynamicCast<const ns3::Ipv4QueueDiscItem>(item);
    if (!ip) return;
    uint32_t dst = ip->GetHeader().GetDestination().Get();
    int cls = ((dst >> 16) & 0xff) == 20 ? 1 : 0;
    double sojourn = (ns3::Simulator::Now() - item->GetTimeStamp()).GetSeconds();
    double size = item->GetSize();
    sojourn_w[cls] += sojourn * size;
    bytes[cls] += size;
}
}
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--capacity-mbps", type=float, default=100.0)
    parser.add_argument("--campus-flows", type=int, default=5)
    parser.add_argument("--dtn-flows", type=int, default=5)
    parser.add_argument("--campus-rtt-ms", type=float, default=10.0)
    parser.add_argument("--dtn-rtt-ms", type=float, default=100.0)
    parser.add_argument("--buffer-bytes", type=int, default=1_250_000)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    ns.cppyy.cppdef(CPP)
    bench = ns.cppyy.gbl.scidmz_bench
    bench.warmup_s = args.warmup_s

    cfg = ns.Config
    cfg.SetDefault("ns3::TcpL4Protocol::SocketType", ns.StringValue("ns3::TcpCubic"))
    cfg.SetDefault("ns3::TcpSocket::SegmentSize", ns.UintegerValue(1448))
    cfg.SetDefault("ns3::TcpSocket::InitialCwnd", ns.UintegerValue(10))
    cfg.SetDefault("ns3::TcpSocket::DelAckCount", ns.UintegerValue(1))
    cfg.SetDefault("ns3::TcpSocket::SndBufSize", ns.UintegerValue(16 << 20))
    cfg.SetDefault("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(16 << 20))
    cfg.SetDefault("ns3::TcpSocketBase::Sack", ns.BooleanValue(True))

    routers = ns.NodeContainer()
    routers.Create(2)
    flows = [("campus", args.campus_rtt_ms)] * args.campus_flows + [
        ("dtn", args.dtn_rtt_ms)
    ] * args.dtn_flows
    senders = ns.NodeContainer()
    senders.Create(len(flows))
    receivers = ns.NodeContainer()
    receivers.Create(len(flows))
    stack = ns.InternetStackHelper()
    stack.Install(routers)
    stack.Install(senders)
    stack.Install(receivers)

    bottleneck = ns.PointToPointHelper()
    bottleneck.SetDeviceAttribute("DataRate", ns.StringValue(f"{args.capacity_mbps}Mbps"))
    bottleneck.SetChannelAttribute("Delay", ns.StringValue("0ms"))
    bottleneck.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", ns.StringValue("1p"))
    core = bottleneck.Install(routers.Get(0), routers.Get(1))
    address = ns.Ipv4AddressHelper()
    address.SetBase(ns.Ipv4Address("10.0.0.0"), ns.Ipv4Mask("255.255.255.0"))
    address.Assign(core)
    tch = ns.TrafficControlHelper()
    tch.Uninstall(core.Get(0))
    tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", ns.StringValue(f"{args.buffer_bytes}B"))
    discs = tch.Install(core.Get(0))
    discs.Get(0).TraceConnectWithoutContext("Dequeue", ns.MakeCallback(bench.Dequeued))

    sinks = []
    for k, (klass, rtt_ms) in enumerate(flows):
        one_way = rtt_ms / 4.0  # sender access + receiver access, both directions
        access = ns.PointToPointHelper()
        access.SetDeviceAttribute("DataRate", ns.StringValue("1Gbps"))
        access.SetChannelAttribute("Delay", ns.StringValue(f"{one_way}ms"))
        left = access.Install(senders.Get(k), routers.Get(0))
        right = access.Install(routers.Get(1), receivers.Get(k))
        octet = 10 if klass == "campus" else 20
        address.SetBase(ns.Ipv4Address(f"10.{50 + octet}.{k}.0"), ns.Ipv4Mask("255.255.255.0"))
        address.Assign(left)
        address.SetBase(ns.Ipv4Address(f"10.{octet}.{k}.0"), ns.Ipv4Mask("255.255.255.0"))
        right_ifaces = address.Assign(right)
        port = 5000 + k
        sink_helper = ns.PacketSinkHelper(
            "ns3::TcpSocketFactory",
            ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo(),
        )
        sink_apps = sink_helper.Install(receivers.Get(k))
        sink_apps.Start(ns.Seconds(0.0))
        source = ns.BulkSendHelper(
            "ns3::TcpSocketFactory",
            ns.InetSocketAddress(right_ifaces.GetAddress(1), port).ConvertTo(),
        )
        source.SetAttribute("MaxBytes", ns.UintegerValue(0))
        source.SetAttribute("SendSize", ns.UintegerValue(1448))
        apps = source.Install(senders.Get(k))
        apps.Start(ns.Seconds(0.0))
        sinks.append((klass, sink_apps.Get(0)))

    ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()

    warm = {}

    def snapshot() -> None:
        for k, (_, app) in enumerate(sinks):
            warm[k] = ns.cppyy.gbl.ns3.DynamicCast[ns.PacketSink](app).GetTotalRx()

    ns.Simulator.Stop(ns.Seconds(args.warmup_s))
    started = time.perf_counter()
    ns.Simulator.Run()
    snapshot()
    ns.Simulator.Stop(ns.Seconds(args.duration_s - args.warmup_s))
    ns.Simulator.Run()
    wall = time.perf_counter() - started

    window = args.duration_s - args.warmup_s
    per_class: dict[str, dict[str, float]] = {}
    for k, (klass, app) in enumerate(sinks):
        total = ns.cppyy.gbl.ns3.DynamicCast[ns.PacketSink](app).GetTotalRx()
        entry = per_class.setdefault(klass, {"rate_bps": 0.0, "flows": 0})
        entry["rate_bps"] += (total - warm[k]) * 8 / window
        entry["flows"] += 1
    for index, klass in enumerate(("campus", "dtn")):
        if klass in per_class and bench.bytes[index] > 0:
            per_class[klass]["queuing_delay_s"] = bench.sojourn_w[index] / bench.bytes[index]
    ns.Simulator.Destroy()
    result = {"wall_s": wall, "classes": per_class, "args": vars(args)}
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

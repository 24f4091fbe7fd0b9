/*
 * scidmz passive telemetry pipeline, v1model (BMv2 simple_switch).
 *
 * The switch sees mirrored copies of the border router BR1's links (p4/README.md): the
 * campus side and the DTN side before BR1's queue, and the bottleneck side after it. It
 * forwards nothing; every packet is measured and dropped. Paper §3.4, algorithms 2, 5, 7,
 * plus SEQ/ACK matching for RTT, and loss telemetry after P4BS (seed 003 §IV-B): resent data
 * per class (method 1), data leaving BR1 per class (method 2, with class_traffic) and the
 * sojourn sum and count for a mean queuing delay per sample time. The entity names and widths are the contract in
 * operator/scidmz/contract/pipeline.py (tests check that this file declares each one).
 */
#include <core.p4>
#include <v1model.p4>

const bit<16> TYPE_IPV4 = 0x0800;
const bit<16> TYPE_IPV6 = 0x86DD;
const bit<8>  PROTO_TCP = 6;
// Class ids: 0 not measured, 1 the campus, 2..65 one per DTN host of the link (the
// collector installs them); every per-class counter and register has CLASS_SLOTS cells.
const bit<8>  CLASS_CAMPUS = 1;
const bit<8>  FIRST_DTN_CLASS = 2;
const bit<32> CLASS_SLOTS = 66;
const bit<8>  ROLE_CAMPUS_SIDE = 1;
const bit<8>  ROLE_DTN_SIDE = 2;
const bit<8>  ROLE_BOTTLENECK_SIDE = 3;
const bit<8>  STOP_FIN = 1;
const bit<8>  STOP_IDLE = 2;
const bit<32> FLOW_SLOTS = 65536;

header ethernet_t { bit<48> dst_addr; bit<48> src_addr; bit<16> ether_type; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> total_len; bit<16> identification;
    bit<3> flags; bit<13> frag_offset; bit<8> ttl; bit<8> protocol; bit<16> hdr_checksum;
    bit<32> src_addr; bit<32> dst_addr;
}
header ipv6_t {
    bit<4> version; bit<8> traffic_class; bit<20> flow_label; bit<16> payload_len;
    bit<8> next_hdr; bit<8> hop_limit; bit<128> src_addr; bit<128> dst_addr;
}
header tcp_t {
    bit<16> src_port; bit<16> dst_port; bit<32> seq_no; bit<32> ack_no; bit<4> data_offset;
    bit<4> res; bit<8> flags; bit<16> window; bit<16> checksum; bit<16> urgent_ptr;
}
struct headers_t { ethernet_t ethernet; ipv4_t ipv4; ipv6_t ipv6; tcp_t tcp; }

struct rtt_sample_t { bit<32> flow_hash; bit<8> class_id; bit<32> rtt_ns; }
struct flow_start_t { bit<32> flow_hash; bit<8> class_id; }
struct flow_stop_t { bit<32> flow_hash; bit<8> class_id; bit<8> reason; }

struct metadata_t {
    bit<8>  class_id;         // 0: neither class (not measured)
    bit<8>  role;             // which tapped side of BR1 this copy came from
    bit<16> c_th;
    bit<48> t_th_ns;
    bit<48> idle_ns;
    bit<48> rtt_max_ns;
    bit<32> payload_len;
    bit<32> flow_hash;        // direction-independent 5-tuple hash
    bit<32> packet_hash;      // identifies one packet on both sides of BR1
}

parser ScidmzParser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t std) {
    state start { pkt.extract(hdr.ethernet); transition select(hdr.ethernet.ether_type) {
        TYPE_IPV4: ipv4; TYPE_IPV6: ipv6; default: accept; } }
    state ipv4 { pkt.extract(hdr.ipv4); transition select(hdr.ipv4.protocol) {
        PROTO_TCP: tcp; default: accept; } }
    state ipv6 { pkt.extract(hdr.ipv6); transition select(hdr.ipv6.next_hdr) {
        PROTO_TCP: tcp; default: accept; } }
    state tcp { pkt.extract(hdr.tcp); transition accept; }
}

control ScidmzVerify(inout headers_t hdr, inout metadata_t meta) { apply { } }

control ScidmzIngress(inout headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t std) {
    direct_counter(CounterType.bytes) class_bytes_v4;
    direct_counter(CounterType.bytes) class_bytes_v6;
    counter(CLASS_SLOTS, CounterType.packets_and_bytes) class_traffic;
    counter(CLASS_SLOTS, CounterType.packets_and_bytes) class_retrans;
    counter(CLASS_SLOTS, CounterType.packets_and_bytes) class_egress;
    register<bit<48>>(CLASS_SLOTS) queuing_delay_ns;
    register<bit<48>>(FLOW_SLOTS) packet_ts;
    register<bit<8>>(FLOW_SLOTS) packet_class;
    register<bit<48>>(FLOW_SLOTS) seq_ts;
    register<bit<32>>(FLOW_SLOTS) seq_sig;
    register<bit<16>>(FLOW_SLOTS) flow_packets;
    register<bit<48>>(FLOW_SLOTS) flow_last_ns;
    register<bit<8>>(FLOW_SLOTS) flow_active;
    register<bit<32>>(FLOW_SLOTS) flow_next_seq;
    register<bit<48>>(CLASS_SLOTS) queuing_delay_sum_1024ns;
    register<bit<32>>(CLASS_SLOTS) queuing_delay_count;
    register<bit<48>>(1) tap_clock_ns;

    action set_class(bit<8> class_id) { meta.class_id = class_id; }
    action set_tap_role(bit<8> role) { meta.role = role; }
    action set_settings(bit<16> c_th, bit<48> t_th_ns, bit<48> idle_ns, bit<48> rtt_max_ns) {
        meta.c_th = c_th; meta.t_th_ns = t_th_ns; meta.idle_ns = idle_ns;
        meta.rtt_max_ns = rtt_max_ns;
    }

    // Algorithm 2: data packets are classified, and counted, by destination: each DTN
    // host's receiver prefix (its own class) and the remote-network prefix (longest
    // prefix first). The collector installs
    // the same prefixes in the reverse_* tables, which classify pure ACKs by source and
    // count nothing, so the class byte counters hold data bytes only.
    table classify_v4 {
        key = { hdr.ipv4.dst_addr: lpm; }
        actions = { set_class; NoAction; }
        counters = class_bytes_v4;
        size = 256;
        default_action = NoAction();
    }
    table classify_v6 {
        key = { hdr.ipv6.dst_addr: lpm; }
        actions = { set_class; NoAction; }
        counters = class_bytes_v6;
        size = 256;
        default_action = NoAction();
    }
    table reverse_v4 {
        key = { hdr.ipv4.src_addr: lpm; }
        actions = { set_class; NoAction; }
        size = 256;
        default_action = NoAction();
    }
    table reverse_v6 {
        key = { hdr.ipv6.src_addr: lpm; }
        actions = { set_class; NoAction; }
        size = 256;
        default_action = NoAction();
    }
    table tap_ports {
        key = { std.ingress_port: exact; }
        actions = { set_tap_role; NoAction; }
        size = 16;
        default_action = NoAction();
    }
    // Keyless: the collector sets C_TH, T_TH, the idle timeout and the RTT horizon through
    // the default action.
    table settings {
        actions = { set_settings; NoAction; }
        size = 1;
        default_action = set_settings(10, 100000000, 2000000000, 1000000000);
    }

    apply {
        if (!hdr.tcp.isValid()) { mark_to_drop(std); return; }
        // v1model timestamps are microseconds; everything the collector reads is in ns.
        bit<48> now_ns = std.ingress_global_timestamp * 1000;
        tap_ports.apply();
        settings.apply();
        // The tap's clock: the counters cover everything up to the last tapped packet's
        // time, so the collector divides their growth by this clock's, not its own.
        if (meta.role != 0) { tap_clock_ns.write(0, now_ns); }
        bit<32> ip_payload;
        if (hdr.ipv4.isValid()) {
            ip_payload = (bit<32>)hdr.ipv4.total_len - ((bit<32>)hdr.ipv4.ihl << 2);
            hash(meta.flow_hash, HashAlgorithm.crc32, 32w0,
                 { hdr.ipv4.src_addr ^ hdr.ipv4.dst_addr, hdr.tcp.src_port ^ hdr.tcp.dst_port },
                 32w0xffffffff);
            hash(meta.packet_hash, HashAlgorithm.crc32, 32w0,
                 { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4.identification,
                   hdr.tcp.seq_no, hdr.tcp.ack_no }, 32w0xffffffff);
        } else {
            ip_payload = (bit<32>)hdr.ipv6.payload_len;
            hash(meta.flow_hash, HashAlgorithm.crc32, 32w0,
                 { hdr.ipv6.src_addr ^ hdr.ipv6.dst_addr, hdr.tcp.src_port ^ hdr.tcp.dst_port },
                 32w0xffffffff);
            hash(meta.packet_hash, HashAlgorithm.crc32, 32w0,
                 { hdr.ipv6.src_addr, hdr.ipv6.dst_addr, hdr.ipv6.flow_label,
                   hdr.tcp.seq_no, hdr.tcp.ack_no }, 32w0xffffffff);
        }
        meta.payload_len = ip_payload - ((bit<32>)hdr.tcp.data_offset << 2);
        bool is_data = meta.payload_len > 0 || (hdr.tcp.flags & 8w0x01) != 0;
        bit<32> flow_slot = meta.flow_hash & (FLOW_SLOTS - 1);
        bit<32> packet_slot = meta.packet_hash & (FLOW_SLOTS - 1);

        if (meta.role == ROLE_BOTTLENECK_SIDE) {
            if (is_data) {
                // Algorithm 5, second half: this data packet left BR1's queue now. Its class
                // was stored with its BR1-ingress time, so nothing is classified (or counted)
                // twice.
                bit<48> entered;
                bit<8> entered_class;
                packet_ts.read(entered, packet_slot);
                packet_class.read(entered_class, packet_slot);
                if (entered != 0 && entered <= now_ns && entered_class != 0) {
                    bit<48> waited = now_ns - entered;
                    queuing_delay_ns.write((bit<32>)entered_class, waited);
                    // method 2's egress count, and the sum and count of a per-T mean sojourn
                    class_egress.count((bit<32>)entered_class);
                    bit<48> waited_sum;
                    bit<32> waited_count;
                    queuing_delay_sum_1024ns.read(waited_sum, (bit<32>)entered_class);
                    queuing_delay_count.read(waited_count, (bit<32>)entered_class);
                    queuing_delay_sum_1024ns.write((bit<32>)entered_class,
                                                   waited_sum + (waited >> 10));
                    queuing_delay_count.write((bit<32>)entered_class, waited_count + 1);
                }
            } else if ((hdr.tcp.flags & 8w0x10) != 0) {
                // A pure ACK back from the remote side: match it against remembered data.
                if (hdr.ipv4.isValid()) { reverse_v4.apply(); } else { reverse_v6.apply(); }
                if (meta.class_id != 0) {
                    bit<32> sig;
                    hash(sig, HashAlgorithm.crc32, 32w0, { meta.flow_hash, hdr.tcp.ack_no },
                         32w0xffffffff);
                    bit<32> slot = sig & (FLOW_SLOTS - 1);
                    bit<32> owner;
                    seq_sig.read(owner, slot);
                    if (owner == sig) {
                        bit<48> sent;
                        seq_ts.read(sent, slot);
                        bit<48> rtt = now_ns - sent;
                        if (rtt < meta.rtt_max_ns) {
                            digest<rtt_sample_t>(1, { meta.flow_hash, meta.class_id,
                                                      (bit<32>)rtt });
                        }
                        seq_sig.write(slot, 0);
                    }
                }
            }
            mark_to_drop(std);
            return;
        }
        // Campus or DTN side: data on its way into BR1 (ACKs towards the senders are not
        // needed here). Untapped ports (role 0) measure nothing.
        if (meta.role == 0 || !is_data) { mark_to_drop(std); return; }
        if (hdr.ipv4.isValid()) { classify_v4.apply(); } else { classify_v6.apply(); }
        if (meta.class_id == 0) { mark_to_drop(std); return; }
        class_traffic.count((bit<32>)meta.class_id);

        // Loss, P4BS method 1: data starting below the next SEQ this flow is known to have
        // sent is a retransmission. A keep-alive (one byte just below it) is not.
        if (meta.payload_len > 0) {
            bit<32> next_seq;
            flow_next_seq.read(next_seq, flow_slot);
            bit<32> behind = next_seq - hdr.tcp.seq_no;   // > 0 (as signed): seq before next
            bool keepalive = meta.payload_len == 1 && behind == 1;
            if (next_seq != 0 && behind != 0 && behind < 32w0x80000000) {
                if (!keepalive) { class_retrans.count((bit<32>)meta.class_id); }
            } else {
                flow_next_seq.write(flow_slot, hdr.tcp.seq_no + meta.payload_len);
            }
        }

        // Algorithm 5, first half: when (and as which class) this packet reached BR1.
        packet_ts.write(packet_slot, now_ns);
        packet_class.write(packet_slot, meta.class_id);
        // RTT: remember when data expecting ACK (seq + payload) passed; Karn's rule voids a
        // slot whose data is seen twice (a retransmission).
        if (meta.payload_len > 0) {
            bit<32> expected = hdr.tcp.seq_no + meta.payload_len;
            bit<32> sig;
            hash(sig, HashAlgorithm.crc32, 32w0, { meta.flow_hash, expected }, 32w0xffffffff);
            bit<32> slot = sig & (FLOW_SLOTS - 1);
            bit<32> owner;
            seq_sig.read(owner, slot);
            bit<48> sent;
            seq_ts.read(sent, slot);
            if (owner == sig && now_ns - sent < meta.rtt_max_ns) {
                seq_sig.write(slot, 0);
            } else {
                seq_sig.write(slot, sig);
                seq_ts.write(slot, now_ns);
            }
        }
        // Algorithm 7: C_TH packets less than T_TH apart make a flow active; FIN, or a
        // packet after the idle timeout (lazy expiry), ends it.
        bit<16> count;
        bit<48> last;
        bit<8> active;
        flow_packets.read(count, flow_slot);
        flow_last_ns.read(last, flow_slot);
        flow_active.read(active, flow_slot);
        if (active == 1 && now_ns - last > meta.idle_ns) {
            digest<flow_stop_t>(1, { meta.flow_hash, meta.class_id, STOP_IDLE });
            active = 0;
            count = 0;
        }
        if (now_ns - last < meta.t_th_ns) {
            if (count < meta.c_th) { count = count + 1; }
        } else {
            count = 1;
        }
        if (active == 0 && count >= meta.c_th) {
            active = 1;
            digest<flow_start_t>(1, { meta.flow_hash, meta.class_id });
        }
        if ((hdr.tcp.flags & 8w0x01) != 0 && active == 1) {
            active = 0;
            count = 0;
            digest<flow_stop_t>(1, { meta.flow_hash, meta.class_id, STOP_FIN });
        }
        flow_packets.write(flow_slot, count);
        flow_last_ns.write(flow_slot, now_ns);
        flow_active.write(flow_slot, active);
        mark_to_drop(std);
    }
}

control ScidmzEgress(inout headers_t hdr, inout metadata_t meta,
                     inout standard_metadata_t std) { apply { } }
control ScidmzCompute(inout headers_t hdr, inout metadata_t meta) { apply { } }
control ScidmzDeparser(packet_out pkt, in headers_t hdr) { apply { } }

V1Switch(ScidmzParser(), ScidmzVerify(), ScidmzIngress(), ScidmzEgress(), ScidmzCompute(),
         ScidmzDeparser()) main;

/*
 * scidmz passive telemetry pipeline, TNA (Intel Tofino, bf-p4c).
 *
 * The same measurements as ../v1model/scidmz.p4 (paper §3.4, algorithms 2, 5, 7, SEQ/ACK
 * RTT matching and P4BS's loss telemetry), written for Tofino's constraints: register cells of at most 32 bits
 * (timestamps are the low 32 bits of the nanosecond clock; every value derived from them
 * is a difference well under 4.29 s), one RegisterAction per register per packet, and one
 * digest per packet, chosen in the deparser by ig_dprsr_md.digest_type. The sojourn sum of
 * a class is taken over one packet in 16 (packet hash), so that its 32-bit cell lasts a
 * sample time (TNA_QD_SAMPLE_MASK in the contract). Entity names and
 * widths are the contract in operator/scidmz/contract/pipeline.py; bf-p4c prefixes them
 * with the pipe ("pipe.ScidmzIngress.classify_v4"), which the collector accepts.
 *
 * No Tofino compiler runs in this repository's CI: this file is checked by tests for the
 * contract's entities and widths, not compiled. See ../README.md for building it.
 */
#include <core.p4>
#include <tna.p4>

const bit<16> TYPE_IPV4 = 0x0800;
const bit<16> TYPE_IPV6 = 0x86DD;
const bit<8>  PROTO_TCP = 6;
const bit<8>  ROLE_CAMPUS_SIDE = 1;
const bit<8>  ROLE_DTN_SIDE = 2;
const bit<8>  ROLE_BOTTLENECK_SIDE = 3;
const bit<8>  STOP_FIN = 1;
const bit<8>  STOP_IDLE = 2;
const bit<32> FLOW_SLOTS = 65536;
// Class ids: 0 not measured, 1 the campus, 2..65 one per DTN host of the link (the
// collector installs them); every per-class counter and register has CLASS_SLOTS cells.
const bit<32> CLASS_SLOTS = 66;

const bit<3> DIGEST_NONE = 0;
const bit<3> DIGEST_RTT = 1;
const bit<3> DIGEST_FLOW_START = 2;
const bit<3> DIGEST_FLOW_STOP = 3;

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
    bit<8>  class_id;
    bit<8>  role;
    bit<16> c_th;
    bit<32> t_th_ns;
    bit<32> idle_ns;
    bit<32> rtt_max_ns;
    bit<32> now_ns;
    bit<32> payload_len;
    bit<32> flow_hash;
    bit<32> packet_hash;
    bit<32> sig;
    bit<32> gap_ns;            // time since this flow's previous data packet
    bit<16> count;             // packets towards C_TH
    bit<8>  transition;        // 0 none, 1 start, 2 stop (FIN), 3 stop (idle)
    bit<32> rtt_ns;
    bit<8>  reason;
    bool    is_data;
    bool    is_fin;
    bit<32> behind;            // the flow's next SEQ minus this packet's SEQ
    bit<32> waited_1024ns;     // this packet's sojourn >> 10
}

parser ScidmzIngressParser(packet_in pkt, out headers_t hdr, out metadata_t meta,
                           out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        meta = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false, false, 0, 0};
        transition ethernet;
    }
    state ethernet { pkt.extract(hdr.ethernet); transition select(hdr.ethernet.ether_type) {
        TYPE_IPV4: ipv4; TYPE_IPV6: ipv6; default: accept; } }
    state ipv4 { pkt.extract(hdr.ipv4); transition select(hdr.ipv4.protocol) {
        PROTO_TCP: tcp; default: accept; } }
    state ipv6 { pkt.extract(hdr.ipv6); transition select(hdr.ipv6.next_hdr) {
        PROTO_TCP: tcp; default: accept; } }
    state tcp { pkt.extract(hdr.tcp); transition accept; }
}

control ScidmzIngress(inout headers_t hdr, inout metadata_t meta,
                      in ingress_intrinsic_metadata_t ig_intr_md,
                      in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                      inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                      inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    DirectCounter<bit<64>>(CounterType_t.BYTES) class_bytes_v4;
    DirectCounter<bit<64>>(CounterType_t.BYTES) class_bytes_v6;
    Counter<bit<64>, bit<32>>(CLASS_SLOTS, CounterType_t.PACKETS_AND_BYTES) class_traffic;
    Counter<bit<64>, bit<32>>(CLASS_SLOTS, CounterType_t.PACKETS_AND_BYTES) class_retrans;
    Counter<bit<64>, bit<32>>(CLASS_SLOTS, CounterType_t.PACKETS_AND_BYTES) class_egress;
    Register<bit<32>, bit<32>>(CLASS_SLOTS) queuing_delay_ns;
    Register<bit<32>, bit<32>>(FLOW_SLOTS) packet_ts;
    Register<bit<8>, bit<32>>(FLOW_SLOTS) packet_class;
    Register<bit<32>, bit<32>>(FLOW_SLOTS) seq_ts;
    Register<bit<32>, bit<32>>(FLOW_SLOTS) seq_sig;
    Register<bit<16>, bit<32>>(FLOW_SLOTS) flow_packets;
    Register<bit<32>, bit<32>>(FLOW_SLOTS) flow_last_ns;
    Register<bit<8>, bit<32>>(FLOW_SLOTS) flow_active;
    Register<bit<32>, bit<32>>(FLOW_SLOTS) flow_next_seq;
    Register<bit<32>, bit<32>>(CLASS_SLOTS) queuing_delay_sum_1024ns;
    Register<bit<32>, bit<32>>(CLASS_SLOTS) queuing_delay_count;
    Register<bit<32>, bit<32>>(1) tap_clock_ns;

    Hash<bit<32>>(HashAlgorithm_t.CRC32) flow_hash_v4;
    Hash<bit<32>>(HashAlgorithm_t.CRC32) flow_hash_v6;
    Hash<bit<32>>(HashAlgorithm_t.CRC32) packet_hash_v4;
    Hash<bit<32>>(HashAlgorithm_t.CRC32) packet_hash_v6;
    Hash<bit<32>>(HashAlgorithm_t.CRC32) data_sig;
    Hash<bit<32>>(HashAlgorithm_t.CRC32) ack_sig;

    action set_class(bit<8> class_id) { meta.class_id = class_id; }
    action set_tap_role(bit<8> role) { meta.role = role; }
    action set_settings(bit<16> c_th, bit<48> t_th_ns, bit<48> idle_ns, bit<48> rtt_max_ns) {
        meta.c_th = c_th;
        meta.t_th_ns = t_th_ns[31:0];
        meta.idle_ns = idle_ns[31:0];
        meta.rtt_max_ns = rtt_max_ns[31:0];
    }

    // Algorithm 2: data entering BR1 is classified, and counted, by destination.
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
    // Pure ACKs coming back on the bottleneck side are classified by source.
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
        key = { ig_intr_md.ingress_port: exact; }
        actions = { set_tap_role; NoAction; }
        size = 16;
        default_action = NoAction();
    }
    table settings {
        actions = { set_settings; NoAction; }
        size = 1;
        default_action = set_settings(10, 100000000, 2000000000, 1000000000);
    }

    // ---- algorithm 5: BR1 sojourn per class ------------------------------------------
    RegisterAction<bit<32>, bit<32>, bit<32>>(tap_clock_ns) stamp_tap_clock = {
        void apply(inout bit<32> value) { value = meta.now_ns; }
    };
    RegisterAction<bit<32>, bit<32>, bit<32>>(packet_ts) stamp_entry = {
        void apply(inout bit<32> value) { value = meta.now_ns; }
    };
    RegisterAction<bit<32>, bit<32>, bit<32>>(packet_ts) sojourn = {
        void apply(inout bit<32> value, out bit<32> result) {
            result = meta.now_ns - value;   // wraps correctly: a difference of 32-bit times
            value = 0;
        }
    };
    RegisterAction<bit<8>, bit<32>, bit<8>>(packet_class) remember_class = {
        void apply(inout bit<8> value) { value = meta.class_id; }
    };
    RegisterAction<bit<8>, bit<32>, bit<8>>(packet_class) recall_class = {
        void apply(inout bit<8> value, out bit<8> result) { result = value; }
    };
    RegisterAction<bit<32>, bit<32>, bit<32>>(queuing_delay_ns) store_delay = {
        void apply(inout bit<32> value) { value = meta.rtt_ns; }
    };

    RegisterAction<bit<32>, bit<32>, bit<32>>(queuing_delay_sum_1024ns) add_sojourn = {
        void apply(inout bit<32> value) { value = value + meta.waited_1024ns; }
    };
    RegisterAction<bit<32>, bit<32>, bit<32>>(queuing_delay_count) count_sojourn = {
        void apply(inout bit<32> value) { value = value + 1; }
    };

    // ---- loss, P4BS method 1: data below the flow's next SEQ is resent ---------------
    RegisterAction<bit<32>, bit<32>, bit<32>>(flow_next_seq) follow_seq = {
        // returns how far this packet's SEQ is behind the next one (0: new data)
        void apply(inout bit<32> value, out bit<32> behind) {
            behind = value - hdr.tcp.seq_no;
            if (value == 0 || behind == 0 || behind >= 32w0x80000000) {
                value = hdr.tcp.seq_no + meta.payload_len;
                behind = 0;
            }
        }
    };

    // ---- RTT: SEQ slots with Karn's rule --------------------------------------------
    RegisterAction<bit<32>, bit<32>, bit<32>>(seq_sig) claim_slot = {
        // returns 1 when the slot already holds this data: a retransmission, so void it
        void apply(inout bit<32> value, out bit<32> retransmitted) {
            if (value == meta.sig) { value = 0; retransmitted = 1; }
            else { value = meta.sig; retransmitted = 0; }
        }
    };
    RegisterAction<bit<32>, bit<32>, bit<32>>(seq_ts) stamp_data = {
        void apply(inout bit<32> value) { value = meta.now_ns; }
    };
    RegisterAction<bit<32>, bit<32>, bit<32>>(seq_sig) release_slot = {
        void apply(inout bit<32> value, out bit<32> matched) {
            if (value == meta.sig) { value = 0; matched = 1; } else { matched = 0; }
        }
    };
    RegisterAction<bit<32>, bit<32>, bit<32>>(seq_ts) elapsed_since_data = {
        void apply(inout bit<32> value, out bit<32> result) { result = meta.now_ns - value; }
    };

    // ---- algorithm 7: the activity rule ---------------------------------------------
    RegisterAction<bit<32>, bit<32>, bit<32>>(flow_last_ns) touch_flow = {
        void apply(inout bit<32> value, out bit<32> gap) {
            gap = meta.now_ns - value;
            value = meta.now_ns;
        }
    };
    RegisterAction<bit<16>, bit<32>, bit<16>>(flow_packets) count_recent = {
        void apply(inout bit<16> value, out bit<16> result) {
            if (meta.gap_ns < meta.t_th_ns) {
                if (value < meta.c_th) { value = value + 1; }
            } else {
                value = 1;
            }
            result = value;
        }
    };
    RegisterAction<bit<8>, bit<32>, bit<8>>(flow_active) follow_activity = {
        // 1: became active, 2: ended by FIN, 3: ended by idle timeout, 0: no change
        void apply(inout bit<8> value, out bit<8> transition) {
            transition = 0;
            if (value == 1 && meta.is_fin) {
                value = 0; transition = 2;
            } else if (value == 1 && meta.gap_ns > meta.idle_ns) {
                value = 0; transition = 3;
            } else if (value == 0 && meta.count >= meta.c_th) {
                value = 1; transition = 1;
            }
        }
    };

    apply {
        if (!hdr.tcp.isValid()) { ig_dprsr_md.drop_ctl = 1; exit; }
        meta.now_ns = ig_prsr_md.global_tstamp[31:0];
        tap_ports.apply();
        settings.apply();
        // The tap's clock: the counters cover everything up to the last tapped packet's
        // time, so the collector divides their growth by this clock's, not its own.
        if (meta.role != 0) { stamp_tap_clock.execute(0); }
        bit<32> ip_payload;
        if (hdr.ipv4.isValid()) {
            ip_payload = (bit<32>)hdr.ipv4.total_len - ((bit<32>)hdr.ipv4.ihl << 2);
            meta.flow_hash = flow_hash_v4.get({ hdr.ipv4.src_addr ^ hdr.ipv4.dst_addr,
                                                hdr.tcp.src_port ^ hdr.tcp.dst_port });
            meta.packet_hash = packet_hash_v4.get({ hdr.ipv4.src_addr, hdr.ipv4.dst_addr,
                                                    hdr.ipv4.identification, hdr.tcp.seq_no,
                                                    hdr.tcp.ack_no });
        } else {
            ip_payload = (bit<32>)hdr.ipv6.payload_len;
            meta.flow_hash = flow_hash_v6.get({ hdr.ipv6.src_addr ^ hdr.ipv6.dst_addr,
                                                hdr.tcp.src_port ^ hdr.tcp.dst_port });
            meta.packet_hash = packet_hash_v6.get({ hdr.ipv6.src_addr, hdr.ipv6.dst_addr,
                                                    hdr.ipv6.flow_label, hdr.tcp.seq_no,
                                                    hdr.tcp.ack_no });
        }
        meta.payload_len = ip_payload - ((bit<32>)hdr.tcp.data_offset << 2);
        meta.is_fin = (hdr.tcp.flags & 8w0x01) != 0;
        meta.is_data = meta.payload_len > 0 || meta.is_fin;
        bit<32> flow_slot = meta.flow_hash & (FLOW_SLOTS - 1);
        bit<32> packet_slot = meta.packet_hash & (FLOW_SLOTS - 1);

        if (meta.role == ROLE_BOTTLENECK_SIDE) {
            if (meta.is_data) {
                // Algorithm 5, second half: the packet left BR1's queue now.
                meta.rtt_ns = sojourn.execute(packet_slot);
                bit<8> entered_class = recall_class.execute(packet_slot);
                if (entered_class != 0 && meta.rtt_ns < meta.rtt_max_ns) {
                    store_delay.execute((bit<32>)entered_class);
                    class_egress.count((bit<32>)entered_class);
                    if ((meta.packet_hash & 32w0xF) == 0) {
                        meta.waited_1024ns = meta.rtt_ns >> 10;
                        add_sojourn.execute((bit<32>)entered_class);
                        count_sojourn.execute((bit<32>)entered_class);
                    }
                }
            } else if ((hdr.tcp.flags & 8w0x10) != 0) {
                if (hdr.ipv4.isValid()) { reverse_v4.apply(); } else { reverse_v6.apply(); }
                if (meta.class_id != 0) {
                    meta.sig = ack_sig.get({ meta.flow_hash, hdr.tcp.ack_no });
                    bit<32> slot = meta.sig & (FLOW_SLOTS - 1);
                    if (release_slot.execute(slot) == 1) {
                        meta.rtt_ns = elapsed_since_data.execute(slot);
                        if (meta.rtt_ns < meta.rtt_max_ns) {
                            ig_dprsr_md.digest_type = DIGEST_RTT;
                        }
                    }
                }
            }
            ig_dprsr_md.drop_ctl = 1;
            exit;
        }
        if (meta.role == 0 || !meta.is_data) { ig_dprsr_md.drop_ctl = 1; exit; }
        if (hdr.ipv4.isValid()) { classify_v4.apply(); } else { classify_v6.apply(); }
        if (meta.class_id == 0) { ig_dprsr_md.drop_ctl = 1; exit; }
        class_traffic.count((bit<32>)meta.class_id);
        if (meta.payload_len > 0) {
            meta.behind = follow_seq.execute(flow_slot);
            // a keep-alive (one byte just below the next SEQ) is not a retransmission
            if (meta.behind != 0 && !(meta.payload_len == 1 && meta.behind == 1)) {
                class_retrans.count((bit<32>)meta.class_id);
            }
        }

        // Algorithm 5, first half.
        stamp_entry.execute(packet_slot);
        remember_class.execute(packet_slot);
        // RTT: remember when data expecting ACK (seq + payload) passed.
        if (meta.payload_len > 0) {
            meta.sig = data_sig.get({ meta.flow_hash, hdr.tcp.seq_no + meta.payload_len });
            bit<32> slot = meta.sig & (FLOW_SLOTS - 1);
            if (claim_slot.execute(slot) == 0) {
                stamp_data.execute(slot);
            }
        }
        // Algorithm 7.
        meta.gap_ns = touch_flow.execute(flow_slot);
        meta.count = count_recent.execute(flow_slot);
        meta.transition = follow_activity.execute(flow_slot);
        if (meta.transition == 1) {
            ig_dprsr_md.digest_type = DIGEST_FLOW_START;
        } else if (meta.transition != 0) {
            meta.reason = meta.transition == 2 ? STOP_FIN : STOP_IDLE;
            ig_dprsr_md.digest_type = DIGEST_FLOW_STOP;
        }
        ig_dprsr_md.drop_ctl = 1;
    }
}

control ScidmzIngressDeparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                              in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Digest<rtt_sample_t>() rtt_sample_digest;
    Digest<flow_start_t>() flow_start_digest;
    Digest<flow_stop_t>() flow_stop_digest;
    apply {
        if (ig_dprsr_md.digest_type == DIGEST_RTT) {
            rtt_sample_digest.pack({ meta.flow_hash, meta.class_id, meta.rtt_ns });
        } else if (ig_dprsr_md.digest_type == DIGEST_FLOW_START) {
            flow_start_digest.pack({ meta.flow_hash, meta.class_id });
        } else if (ig_dprsr_md.digest_type == DIGEST_FLOW_STOP) {
            flow_stop_digest.pack({ meta.flow_hash, meta.class_id, meta.reason });
        }
    }
}

parser ScidmzEgressParser(packet_in pkt, out headers_t hdr, out metadata_t meta,
                          out egress_intrinsic_metadata_t eg_intr_md) {
    state start { pkt.extract(eg_intr_md); transition accept; }
}
control ScidmzEgress(inout headers_t hdr, inout metadata_t meta,
                     in egress_intrinsic_metadata_t eg_intr_md,
                     in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                     inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                     inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) { apply { } }
control ScidmzEgressDeparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                             in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    apply { }
}

Pipeline(ScidmzIngressParser(), ScidmzIngress(), ScidmzIngressDeparser(),
         ScidmzEgressParser(), ScidmzEgress(), ScidmzEgressDeparser()) pipe;
Switch(pipe) main;

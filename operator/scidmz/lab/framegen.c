/* scidmz frame generator: wire-size TCP frames at a set rate on a packet socket, the load
 * the software tap's capture benchmark (bench/tap_capture.py) offers to a mirror port.
 *
 *   framegen IFACE KIND RATE_FPS SECONDS FLOWS
 *
 * KIND data: 1514-byte frames (Ethernet, IPv4, TCP with timestamps, 1448 bytes of payload)
 * from campus hosts 10.70.0.0/16 to the remote 10.71.4.0/24, each of FLOWS flows sending
 * its next segment in turn; KIND acks: the 66-byte ACKs those flows get back (one per two
 * segments, as delayed ACKs do). The same arguments give the same frames, so a second
 * generator on another interface can stand for the same packets leaving BR1. Frames go
 * out in batches (sendmmsg) on a schedule of RATE_FPS; when the sender cannot keep up it
 * sends as fast as it can. Prints {"sent": N, "seconds": S} at the end.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define DATA_BYTES 1514
#define ACK_BYTES 66
#define MSS 1448

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint16_t checksum(const uint8_t *p, int n) {
    uint32_t sum = 0;
    for (int i = 0; i + 1 < n; i += 2) sum += (uint32_t)(p[i] << 8 | p[i + 1]);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return (uint16_t)~sum;
}

/* One frame of flow `flow`, its `k`-th segment (data) or ACK (acks), into `f`. */
static int frame(uint8_t *f, int acks, uint32_t flow, uint32_t k) {
    int len = acks ? ACK_BYTES : DATA_BYTES;
    memset(f, 0, (size_t)len);
    memcpy(f, "\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00", 14);
    uint8_t *ip = f + 14, *tcp = ip + 20;
    uint32_t campus = htonl(0x0A460000u | ((flow & 0xFFFF) + 1)); /* 10.70.x.y */
    uint32_t remote = htonl(0x0A470400u | (flow % 200 + 10));    /* 10.71.4.z */
    uint16_t campus_port = htons((uint16_t)(10000 + flow % 50000)), remote_port = htons(5201);
    ip[0] = 0x45;
    uint16_t total = htons((uint16_t)(len - 14));
    memcpy(ip + 2, &total, 2);
    uint16_t id = htons((uint16_t)k);
    memcpy(ip + 4, &id, 2);
    ip[8] = 64;
    ip[9] = 6;
    memcpy(ip + 12, acks ? &remote : &campus, 4);
    memcpy(ip + 16, acks ? &campus : &remote, 4);
    uint16_t sum = htons(checksum(ip, 20));
    memcpy(ip + 10, &sum, 2);
    memcpy(tcp, acks ? &remote_port : &campus_port, 2);
    memcpy(tcp + 2, acks ? &campus_port : &remote_port, 2);
    uint32_t seq = htonl(1000u + (acks ? 1u : k * MSS));
    uint32_t ack = htonl(1000u + (acks ? (2 * k + 2) * MSS : 1u));
    memcpy(tcp + 4, &seq, 4);
    memcpy(tcp + 8, &ack, 4);
    tcp[12] = 8 << 4;                       /* 32-byte header: the timestamps option */
    tcp[13] = acks ? 0x10 : 0x18;           /* ACK, or PSH|ACK */
    tcp[14] = 0x20;                         /* window */
    tcp[20] = 1; tcp[21] = 1; tcp[22] = 8; tcp[23] = 10;
    return len;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: framegen IFACE data|acks RATE_FPS SECONDS FLOWS\n");
        return 2;
    }
    int acks = strcmp(argv[2], "acks") == 0;
    double rate = atof(argv[3]), seconds = atof(argv[4]);
    uint32_t flows = (uint32_t)atoi(argv[5]);
    int index = (int)if_nametoindex(argv[1]);
    if (index == 0 || rate <= 0 || seconds <= 0 || flows == 0) {
        fprintf(stderr, "framegen: bad arguments\n");
        return 2;
    }
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd < 0) { perror("socket(AF_PACKET)"); return 1; }
    struct sockaddr_ll sll = {0};
    sll.sll_family = AF_PACKET;
    sll.sll_ifindex = index;
    sll.sll_protocol = htons(ETH_P_IP);
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) { perror("bind"); return 1; }
    int sndbuf = 16 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf);

    static uint8_t frames[BATCH][DATA_BYTES];
    struct iovec iov[BATCH];
    struct mmsghdr msgs[BATCH];
    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9), sent = 0;
    double interval_ns = 1e9 / rate;
    uint32_t k = 0, flow = 0;
    while (now_ns() < end) {
        /* the schedule: frame n is due at start + n * interval */
        uint64_t due = start + (uint64_t)((double)sent * interval_ns);
        uint64_t now = now_ns();
        if (due > now) {
            struct timespec pause = {0, (long)(due - now)};
            if (due - now > 50000) nanosleep(&pause, NULL);
            continue;
        }
        for (int i = 0; i < BATCH; i++) {
            int len = frame(frames[i], acks, flow, k);
            iov[i] = (struct iovec){frames[i], (size_t)len};
            memset(&msgs[i], 0, sizeof msgs[i]);
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            if (++flow == flows) { flow = 0; k++; }
        }
        int done = sendmmsg(fd, msgs, BATCH, 0);
        if (done < 0) { perror("sendmmsg"); return 1; }
        sent += (uint64_t)done;
    }
    printf("{\"sent\": %llu, \"seconds\": %.3f}\n", (unsigned long long)sent,
           (double)(now_ns() - start) / 1e9);
    return 0;
}

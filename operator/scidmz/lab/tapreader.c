/* scidmz tap reader: the lab's passive tap at the border, in front of `scidmz target
 * --source packets`.
 *
 * Reads frames from packet sockets on the border's interfaces and writes one fixed-size
 * record per IPv4/TCP frame to stdout, which the Python source reduces the way the P4
 * program reduces packets. Parsing stays here so Python never touches a frame.
 *
 *   tapreader STATS_FILE IFACE=ROLE[,out] [IFACE=ROLE[,out] ...]
 *
 * ROLE is a small integer the reader copies into every record (the source's tap roles);
 * ",out" takes the frames the interface transmits (after its qdisc: the bottleneck side),
 * otherwise the frames it receives. Timestamps are the kernel's (SO_TIMESTAMPNS).
 *
 * Record (little endian, 40 bytes): u64 timestamp_ns; u32 saddr, daddr (network order as
 * read); u32 seq, ack; u32 ip_bytes; u32 payload_bytes; u16 sport, dport; u8 role;
 * u8 tcp_flags; u16 segments (payload / MSS of a GSO frame, at least 1).
 * STATS_FILE is replaced every second with the kernel's drop counters per interface.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_IFACES 32
#define MSS 1448

struct __attribute__((packed)) record {
    uint64_t timestamp_ns;
    uint32_t saddr, daddr, seq, ack, ip_bytes, payload_bytes;
    uint16_t sport, dport;
    uint8_t role, tcp_flags;
    uint16_t segments;
};

struct tap { int fd; int outgoing; uint8_t role; char name[IF_NAMESIZE + 1]; unsigned long long frames, drops; };

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void write_stats(const char *path, struct tap *taps, int n) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "{");
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\"%s\": {\"frames\": %llu, \"kernel_drops\": %llu}", i ? ", " : "",
                taps[i].name, taps[i].frames, taps[i].drops);
    fprintf(f, "}\n");
    fclose(f);
    rename(tmp, path);
}

static int parse(const unsigned char *buf, ssize_t n, struct record *r) {
    if (n < 14 + 20 || buf[12] != 0x08 || buf[13] != 0x00) return 0;
    const unsigned char *ip = buf + 14;
    if ((ip[0] >> 4) != 4 || ip[9] != 6) return 0;
    unsigned ihl = (ip[0] & 0x0f) * 4u;
    if (n < (ssize_t)(14 + ihl + 20)) return 0;
    const unsigned char *tcp = ip + ihl;
    unsigned total = ((unsigned)ip[2] << 8) | ip[3];
    if (total == 0) total = (unsigned)(n - 14);  /* a GSO frame larger than 64 KiB */
    unsigned doff = (tcp[12] >> 4) * 4u;
    memcpy(&r->saddr, ip + 12, 4);
    memcpy(&r->daddr, ip + 16, 4);
    r->sport = (uint16_t)((tcp[0] << 8) | tcp[1]);
    r->dport = (uint16_t)((tcp[2] << 8) | tcp[3]);
    r->seq = ((uint32_t)tcp[4] << 24) | ((uint32_t)tcp[5] << 16) | ((uint32_t)tcp[6] << 8) | tcp[7];
    r->ack = ((uint32_t)tcp[8] << 24) | ((uint32_t)tcp[9] << 16) | ((uint32_t)tcp[10] << 8) | tcp[11];
    r->tcp_flags = tcp[13];
    r->ip_bytes = total;
    r->payload_bytes = total > ihl + doff ? total - ihl - doff : 0;
    unsigned segments = (r->payload_bytes + MSS - 1) / MSS;
    r->segments = (uint16_t)(segments ? segments : 1);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s STATS_FILE IFACE=ROLE[,out]...\n", argv[0]);
        return 2;
    }
    struct tap taps[MAX_IFACES];
    int ntaps = 0;
    for (int i = 2; i < argc; i++) {
        char name[IF_NAMESIZE + 1];
        unsigned role;
        char dir[8] = "";
        if (ntaps == MAX_IFACES || sscanf(argv[i], "%15[^=]=%u,%7s", name, &role, dir) < 2 || role > 255) {
            fprintf(stderr, "tapreader: bad tap %s (want IFACE=ROLE[,out])\n", argv[i]);
            return 2;
        }
        struct tap *t = &taps[ntaps++];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", name);
        t->role = (uint8_t)role;
        t->outgoing = strcmp(dir, "out") == 0;
        int index = (int)if_nametoindex(name);
        if (index == 0) { fprintf(stderr, "tapreader: no interface %s\n", name); return 2; }
        t->fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
        if (t->fd < 0) { perror("socket(AF_PACKET)"); return 1; }
        struct sockaddr_ll sll = {0};
        sll.sll_family = AF_PACKET;
        sll.sll_protocol = htons(ETH_P_ALL);
        sll.sll_ifindex = index;
        if (bind(t->fd, (struct sockaddr *)&sll, sizeof sll) < 0) { perror("bind"); return 1; }
        /* A mirror port's frames are addressed to the monitored hosts, which a NIC's
         * address filter drops unless it is promiscuous: ask for it while the socket is
         * open (the kernel counts such requests and drops this one with the socket, so the
         * interface is left as it was). */
        struct packet_mreq promisc = {0};
        promisc.mr_ifindex = index;
        promisc.mr_type = PACKET_MR_PROMISC;
        if (setsockopt(t->fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &promisc, sizeof promisc) < 0) {
            perror("PACKET_ADD_MEMBERSHIP");
            return 1;
        }
        int on = 1;
        setsockopt(t->fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
        /* room for the reader (or the target behind it) to fall a second behind at
         * 1 Gb/s on a busy host without the kernel dropping a frame */
        int rcvbuf = 64 << 20;
        setsockopt(t->fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, on_signal);
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    /* A 64 KiB pipe holds ~40 ms of records at 1 Gb/s: the target's pauses (a reduction,
     * a busy core) then stall the reader and the sockets overflow. Ask for 16 MiB (root may
     * exceed fs.pipe-max-size); keep the default where refused. */
    for (int size = 16 << 20; size >= 1 << 20; size >>= 1)
        if (fcntl(STDOUT_FILENO, F_SETPIPE_SZ, size) >= 0) break;

    struct pollfd pfds[MAX_IFACES];
    for (int i = 0; i < ntaps; i++) pfds[i] = (struct pollfd){taps[i].fd, POLLIN, 0};
    unsigned char buf[65536 + 64];
    char cbuf[256];
    uint64_t next_stats = now_ns();
    while (!stop) {
        int ready = poll(pfds, (nfds_t)ntaps, 5);
        if (ready < 0 && errno != EINTR) { perror("poll"); break; }
        for (int i = 0; i < ntaps; i++) {
            struct tap *t = &taps[i];
            for (;;) {
                struct sockaddr_ll from;
                struct iovec iov = {buf, sizeof buf};
                struct msghdr msg = {&from, sizeof from, &iov, 1, cbuf, sizeof cbuf, 0};
                ssize_t n = recvmsg(t->fd, &msg, 0);
                if (n < 0) break;
                if ((from.sll_pkttype == PACKET_OUTGOING) != t->outgoing) continue;
                struct record r = {0};
                if (!parse(buf, n, &r)) continue;
                t->frames++;
                r.role = t->role;
                r.timestamp_ns = now_ns();
                for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
                    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_TIMESTAMPNS) {
                        struct timespec ts;
                        memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                        r.timestamp_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
                    }
                if (fwrite(&r, sizeof r, 1, stdout) != 1) { stop = 1; break; }
            }
        }
        fflush(stdout);
        uint64_t now = now_ns();
        if (now >= next_stats) {
            for (int i = 0; i < ntaps; i++) {
                struct tpacket_stats st;
                socklen_t len = sizeof st;
                if (getsockopt(taps[i].fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0)
                    taps[i].drops += st.tp_drops;
            }
            write_stats(argv[1], taps, ntaps);
            next_stats = now + 1000000000ull;
        }
    }
    write_stats(argv[1], taps, ntaps);
    return 0;
}

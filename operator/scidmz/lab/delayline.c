/* scidmz delay line: the lab's userspace replacement for netem (absent from this kernel).
 *
 * Reads every frame arriving on IN_IF from a packet socket, holds it until its kernel
 * receive timestamp plus the delay of the first route matching its IPv4 destination, and
 * writes it unchanged to OUT_IF. One FIFO per route: the delay of a route is constant, so
 * arrival order is release order and no heap is needed.
 *
 *   delayline IN_IF OUT_IF STATS_FILE PREFIX/LEN=DELAY_US [PREFIX/LEN=DELAY_US ...]
 *
 * Frames matching no route go out at once. Every second STATS_FILE is replaced (write to a
 * temporary file, rename) with one JSON object: frames received, sent, dropped because a
 * FIFO was full or the frame too large, frames the kernel dropped before we read them,
 * and the worst release lag (how late a frame left against its due time). Overloaded, a
 * delay line adds delay rather than dropping: the lag is how a run notices.
 *
 * SIGTERM or SIGINT: write the stats one last time and exit 0.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
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

#define MAX_ROUTES 8
#define SLOTS 32768          /* per route: 100 ms of 300k frames/s */
#define SLOT_BYTES 1600      /* an MTU-1500 frame with room; larger frames are dropped */

struct frame { uint64_t due_ns; uint16_t len; unsigned char data[SLOT_BYTES]; };
struct route { uint32_t net, mask; uint64_t delay_ns; struct frame *fifo; uint32_t head, count; };

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);  /* SO_TIMESTAMPNS stamps with CLOCK_REALTIME */
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int open_socket(const char *ifname, int *ifindex) {
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
    if (fd < 0) { perror("socket(AF_PACKET)"); exit(1); }
    *ifindex = (int)if_nametoindex(ifname);
    if (*ifindex == 0) { fprintf(stderr, "delayline: no interface %s\n", ifname); exit(2); }
    struct sockaddr_ll sll = {0};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = *ifindex;
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) { perror("bind"); exit(1); }
    return fd;
}

static int parse_route(const char *arg, struct route *r) {
    char net[64];
    unsigned len;
    unsigned long long delay_us;
    if (sscanf(arg, "%63[0-9.]/%u=%llu", net, &len, &delay_us) != 3 || len > 32) return -1;
    struct in_addr addr;
    if (inet_pton(AF_INET, net, &addr) != 1) return -1;
    r->mask = len == 0 ? 0 : htonl(~0u << (32 - len));
    r->net = addr.s_addr & r->mask;
    r->delay_ns = delay_us * 1000ull;
    r->fifo = calloc(SLOTS, sizeof(struct frame));
    if (!r->fifo) { perror("calloc"); exit(1); }
    return 0;
}

struct counters { unsigned long long received, sent, dropped_full, dropped_oversize, kernel_drops, max_lag_ns; };

static void write_stats(const char *path, const struct counters *c) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "{\"received\": %llu, \"sent\": %llu, \"dropped_full\": %llu, "
               "\"dropped_oversize\": %llu, \"kernel_drops\": %llu, \"max_lag_us\": %.1f}\n",
            c->received, c->sent, c->dropped_full, c->dropped_oversize, c->kernel_drops,
            (double)c->max_lag_ns / 1000.0);
    fclose(f);
    rename(tmp, path);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s IN_IF OUT_IF STATS_FILE PREFIX/LEN=DELAY_US...\n", argv[0]);
        return 2;
    }
    struct route routes[MAX_ROUTES];
    int nroutes = 0;
    for (int i = 4; i < argc; i++) {
        if (nroutes == MAX_ROUTES || parse_route(argv[i], &routes[nroutes]) < 0) {
            fprintf(stderr, "delayline: bad route %s (want A.B.C.D/LEN=DELAY_US, at most %d)\n",
                    argv[i], MAX_ROUTES);
            return 2;
        }
        nroutes++;
    }
    int in_index, out_index;  /* out_index only for the bind */
    int in_fd = open_socket(argv[1], &in_index);
    int out_fd = open_socket(argv[2], &out_index);
    int on = 1;
    setsockopt(in_fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
    int rcvbuf = 8 << 20;
    setsockopt(in_fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);

    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    struct counters c = {0};
    uint64_t next_stats = now_ns();
    unsigned char buf[65536];
    char cbuf[256];

    while (!stop) {
        /* Sleep until the earliest due frame, a new frame, or the next stats write. */
        uint64_t wake = next_stats;
        for (int r = 0; r < nroutes; r++)
            if (routes[r].count && routes[r].fifo[routes[r].head].due_ns < wake)
                wake = routes[r].fifo[routes[r].head].due_ns;
        uint64_t now = now_ns();
        struct timespec timeout = {0, 0};
        if (wake > now) {
            timeout.tv_sec = (time_t)((wake - now) / 1000000000ull);
            timeout.tv_nsec = (long)((wake - now) % 1000000000ull);
        }
        struct pollfd pfd = {in_fd, POLLIN, 0};
        if (ppoll(&pfd, 1, &timeout, NULL) < 0 && errno != EINTR) { perror("ppoll"); break; }

        for (;;) {
            struct sockaddr_ll from;
            struct iovec iov = {buf, sizeof buf};
            struct msghdr msg = {&from, sizeof from, &iov, 1, cbuf, sizeof cbuf, 0};
            ssize_t n = recvmsg(in_fd, &msg, MSG_TRUNC);
            if (n < 0) break;
            if (from.sll_pkttype == PACKET_OUTGOING) continue;
            c.received++;
            uint64_t stamp = now_ns();
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_TIMESTAMPNS) {
                    struct timespec ts;
                    memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                    stamp = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
                }
            struct route *route = NULL;
            if (n >= 34 && buf[12] == 0x08 && buf[13] == 0x00) {
                uint32_t dst;
                memcpy(&dst, buf + 30, 4);
                for (int r = 0; r < nroutes && !route; r++)
                    if ((dst & routes[r].mask) == routes[r].net) route = &routes[r];
            }
            if (!route) {
                if (send(out_fd, buf, (size_t)n, 0) >= 0) c.sent++;
                continue;
            }
            if (n > SLOT_BYTES) { c.dropped_oversize++; continue; }
            if (route->count == SLOTS) { c.dropped_full++; continue; }
            struct frame *f = &route->fifo[(route->head + route->count) % SLOTS];
            f->due_ns = stamp + route->delay_ns;
            f->len = (uint16_t)n;
            memcpy(f->data, buf, (size_t)n);
            route->count++;
        }

        now = now_ns();
        for (int r = 0; r < nroutes; r++) {
            struct route *route = &routes[r];
            while (route->count && route->fifo[route->head].due_ns <= now) {
                struct frame *f = &route->fifo[route->head];
                if (now - f->due_ns > c.max_lag_ns) c.max_lag_ns = now - f->due_ns;
                if (send(out_fd, f->data, f->len, 0) >= 0) c.sent++;
                route->head = (route->head + 1) % SLOTS;
                route->count--;
            }
        }
        if (now >= next_stats) {
            struct tpacket_stats st;
            socklen_t len = sizeof st;
            if (getsockopt(in_fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0)
                c.kernel_drops += st.tp_drops;  /* the kernel resets these on every read */
            write_stats(argv[3], &c);
            next_stats = now + 1000000000ull;
        }
    }
    write_stats(argv[3], &c);
    return 0;
}

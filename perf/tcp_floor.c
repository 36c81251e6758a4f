/* tcp_floor.c: the loopback TCP ceiling of a 2-rank collective over sockets on this machine.
 *
 * Two processes (one per core, as the perf tools bind 2 ranks) on -s loopback connections
 * (default 2, weft's WEFT_SOCKET_NSOCKS) each send S bytes and receive S bytes at once,
 * non-blocking, S cut into one contiguous part per connection as weft splits a large
 * message, with nothing else to do: no protocol, no reduction. A 2-rank all-reduce of S
 * bytes over TCP sends and receives S per rank (S/2 in its reduce-scatter, S/2 in its
 * all-gather), and its busbw is S / time (nccl-tests' factor 2(n-1)/n = 1), so on as many
 * connections it cannot beat the rate printed here; `make bench`'s socket target (2x Open
 * MPI's TCP BTL, one connection per peer) is reachable only where this rate is 2x Open MPI's.
 * The kernel's copies into and out of the socket buffers are what a core spends its time
 * on, so more connections add little: on the AMD EPYC VM of 2026-11-28 (16-64 MiB, three
 * alternating runs, its two vCPUs on two L3s) one read 2.06-2.48 GB/s and two 1.98-2.24.
 * Like every cross-core figure there it moves with the L3 placement (perf/l3_probe.c): weft's
 * own all-reduce over its two connections read 1.9-5.0 GB/s at 16 MiB across a bench's rounds.
 *
 * Output: one JSON object per size, {"size": S, "time_us": mean, "GBps": S / mean} with
 * GB/s = 1e9 B/s, the mean over -n iterations after -w warm-ups, each iteration started by a
 * one-byte handshake so both sides begin together.
 * Every received byte is checked after each size (exit 1 on a wrong one).
 * Each connection's receive buffer is what weft's socket transport gives connections within
 * one host (lib/sockutil.h, WEFT__SOCK_SAME_HOST_RCVBUF: 1 MiB where net.core.rmem_max
 * admits it, else the kernel's autotuning), so the two compare like for like, or -r BYTES
 * (0: autotuning). On the Zen 3 VM of 2026-11-28 the two settings read alike here (16-64
 * MiB, 3 alternating runs: 0.72-1.40 GB/s fixed, 0.88-1.37 autotuned), and both below
 * weft's all-reduce over the same loopback (about 2.2 GB/s at 16 MiB), which sends in
 * 512 KiB chunks where this sends the whole part at once: a guide, not a bound.
 * Usage: tcp_floor [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP] [-s NSOCKS]
 * [-r RCVBUF] (sizes take K/M/G suffixes, powers of 1024; 1 <= NSOCKS <= 64). Errors name
 * the failing call and exit 1. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "lib/sockutil.h"
#include "perf/size_arg.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *who, const char *what) {
  fprintf(stderr, "tcp_floor: %s: %s: %s\n", who, what, strerror(errno));
  exit(1);
}

/* A -b/-e size (perf/size_arg.h); exits on a bad one. */
static size_t parse_size(const char *s) {
  size_t v;
  if (perf_parse_size(s, &v) != 0) {
    fprintf(stderr, "tcp_floor: bad size \"%s\"\n", s);
    exit(1);
  }
  return v;
}

/* One byte each way: both sides start the timed exchange together. */
static void handshake(int fd, int leader, const char *who) {
  char x = 0;
  if (leader ? write(fd, &x, 1) != 1 || read(fd, &x, 1) != 1 : read(fd, &x, 1) != 1 || write(fd, &x, 1) != 1)
    die(who, "handshake");
}

#define MAX_SOCKS 64

/* Part i of n bytes cut into ns contiguous parts: [*off, *off + return). */
static size_t part_of(size_t n, int ns, int i, size_t *off) {
  size_t base = n / (size_t)ns, extra = n % (size_t)ns;
  *off = (size_t)i * base + ((size_t)i < extra ? (size_t)i : extra);
  return base + ((size_t)i < extra);
}

/* Sends n bytes of sb and receives n bytes into rb, both at once, part i on fds[i]. */
static void exchange(const int *fds, int ns, const char *sb, char *rb, size_t n, const char *who) {
  size_t sent[MAX_SOCKS] = {0}, got[MAX_SOCKS] = {0}, off[MAX_SOCKS], len[MAX_SOCKS];
  struct pollfd p[MAX_SOCKS];
  for (int i = 0; i < ns; i++) len[i] = part_of(n, ns, i, &off[i]);
  for (;;) {
    int open = 0;
    for (int i = 0; i < ns; i++) {
      p[i] = (struct pollfd){fds[i], (short)((sent[i] < len[i] ? POLLOUT : 0) | (got[i] < len[i] ? POLLIN : 0)), 0};
      open += p[i].events != 0;
    }
    if (open == 0) return;
    if (poll(p, (nfds_t)ns, 10000) <= 0) die(who, "poll (no progress for 10 s)");
    for (int i = 0; i < ns; i++) {
      if ((p[i].revents & POLLOUT) && sent[i] < len[i]) {
        /* All that is left: the kernel takes what its buffer holds. A 1 MiB cap per call read
         * 0.81-0.98 GB/s on the Zen 3 VM of 2026-11-28, below weft's own all-reduce over the
         * same loopback (1.15-1.81); without it 0.98-1.69. */
        ssize_t k = send(fds[i], sb + off[i] + sent[i], len[i] - sent[i], MSG_DONTWAIT);
        if (k < 0 && errno != EAGAIN) die(who, "send");
        if (k > 0) sent[i] += (size_t)k;
      }
      if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) && got[i] < len[i]) {
        ssize_t k = recv(fds[i], rb + off[i] + got[i], len[i] - got[i], MSG_DONTWAIT);
        if (k == 0) die(who, "recv (peer closed)");
        if (k < 0 && errno != EAGAIN) die(who, "recv");
        if (k > 0) got[i] += (size_t)k;
      }
    }
  }
}

/* The byte at i of what rank r sends: differs between ranks and along the buffer, so a
 * part landing at the wrong place or from the wrong rank shows. */
static char pattern(int r, size_t i) { return (char)((i * 7 + (size_t)r * 101 + i / 4096) % 251); }

int main(int argc, char **argv) {
  size_t minb = 16u << 20, maxb = 256u << 20;
  int factor = 2, iters = 5, warm = 2, ns = 2, c;
  size_t rcvbuf = weft__sock_same_host_rcvbuf(weft__sock_rmem_max());
  while ((c = getopt(argc, argv, "b:e:f:n:r:s:w:")) != -1) {
    switch (c) {
      case 'b': minb = parse_size(optarg); break;
      case 'e': maxb = parse_size(optarg); break;
      case 'f': factor = atoi(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'w': warm = atoi(optarg); break;
      case 's': ns = atoi(optarg); break;
      case 'r': rcvbuf = parse_size(optarg); break; /* 0: autotuning */
      default:
        fprintf(stderr, "usage: tcp_floor [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP] "
                        "[-s NSOCKS] [-r RCVBUF]\n");
        return 1;
    }
  }
  if (minb == 0 || maxb < minb || factor < 2 || iters < 1 || warm < 0 || ns < 1 || ns > MAX_SOCKS ||
      rcvbuf > (1u << 30)) {
    fprintf(stderr, "tcp_floor: need 0 < MINBYTES <= MAXBYTES, FACTOR >= 2, ITERS >= 1, 1 <= NSOCKS <= %d, "
            "RCVBUF <= 1G\n", MAX_SOCKS);
    return 1;
  }
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof(a);
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, MAX_SOCKS) != 0 ||
      getsockname(ls, (struct sockaddr *)&a, &alen) != 0)
    die("setup", "listening on loopback");
  pid_t child = fork();
  if (child < 0) die("setup", "fork");
  int leader = child != 0, fds[MAX_SOCKS];
  const char *who = leader ? "rank 0" : "rank 1";
  /* accepted in the order connected: the listen queue is FIFO, so fds[i] pair up */
  for (int i = 0; i < ns; i++) {
    if (leader) {
      fds[i] = accept(ls, NULL, NULL);
    } else {
      fds[i] = socket(AF_INET, SOCK_STREAM, 0);
      if (fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&a, sizeof(a)) != 0) fds[i] = -1;
    }
    if (fds[i] < 0) die(who, "connecting");
    int one = 1, rcv = (int)rcvbuf;
    setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (rcv > 0) setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv)); /* as weft, once connected */
  }
  if (leader) printf("# receive buffer: %s\n", rcvbuf > 0 ? "fixed" : "the kernel's autotuning");
  if (leader && rcvbuf > 0) printf("# SO_RCVBUF %zu bytes asked (Linux grants twice it)\n", rcvbuf);
  cpu_set_t cs;
  CPU_ZERO(&cs);
  CPU_SET(leader ? 0 : 1, &cs);
  sched_setaffinity(0, sizeof(cs), &cs); /* as the perf tools bind 2 ranks; best effort */
  char *sb = malloc(maxb), *rb = malloc(maxb);
  if (sb == NULL || rb == NULL) die(who, "allocating the buffers");
  for (size_t i = 0; i < maxb; i++) sb[i] = pattern(!leader, i); /* first touch by their owner */
  memset(rb, 0, maxb);
  for (size_t s = minb; s <= maxb; s *= (size_t)factor) {
    double total = 0;
    for (int i = -warm; i < iters; i++) {
      handshake(fds[0], leader, who);
      double t0 = now_s();
      exchange(fds, ns, sb, rb, s, who);
      if (i >= 0) total += now_s() - t0;
    }
    for (size_t i = 0; i < s; i++)
      if (rb[i] != pattern(leader, i)) {
        fprintf(stderr, "tcp_floor: %s: received byte %zu of %zu is wrong\n", who, i, s);
        return 1;
      }
    double mean = total / iters;
    if (leader) printf("{\"size\": %zu, \"time_us\": %.2f, \"GBps\": %.3f}\n", s, mean * 1e6, (double)s / mean / 1e9);
    fflush(stdout);
    if (maxb / (size_t)factor < s) break;
  }
  for (int i = 0; i < ns; i++) close(fds[i]);
  if (leader) {
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "tcp_floor: rank 1 failed\n");
      return 1;
    }
  }
  return 0;
}

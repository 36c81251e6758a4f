/* tcp_floor.c: the loopback TCP ceiling of a 2-rank collective over sockets on this machine.
 *
 * Two processes (one per core, as the perf tools bind 2 ranks) on one loopback connection
 * each send S bytes and receive S bytes at once, non-blocking, with nothing else to do: no
 * protocol, no reduction. A 2-rank all-reduce of S bytes over TCP sends and receives S per
 * rank (S/2 in its reduce-scatter, S/2 in its all-gather), and its busbw is S / time
 * (nccl-tests' factor 2(n-1)/n = 1), so it cannot beat the rate printed here; `make bench`'s
 * socket target (2x Open MPI's TCP BTL) is reachable only where this rate is 2x Open MPI's.
 * One connection: more do not add cores, and the kernel's copies into and out of the socket
 * buffers are what a core spends its time on.
 *
 * Output: one JSON object per size, {"size": S, "time_us": mean, "GBps": S / mean} with
 * GB/s = 1e9 B/s, the mean over -n iterations after -w warm-ups, each iteration started by a
 * one-byte handshake so both sides begin together.
 * Usage: tcp_floor [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP]
 * (sizes take K/M/G suffixes, powers of 1024). Errors name the failing call and exit 1. */
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

/* Sends n bytes of sb and receives n bytes into rb, both at once. */
static void exchange(int fd, const char *sb, char *rb, size_t n, const char *who) {
  size_t sent = 0, got = 0;
  while (sent < n || got < n) {
    struct pollfd p = {fd, (short)((sent < n ? POLLOUT : 0) | (got < n ? POLLIN : 0)), 0};
    if (poll(&p, 1, 10000) <= 0) die(who, "poll (no progress for 10 s)");
    if ((p.revents & POLLOUT) && sent < n) {
      ssize_t k = send(fd, sb + sent, n - sent > (1u << 20) ? (1u << 20) : n - sent, MSG_DONTWAIT);
      if (k < 0 && errno != EAGAIN) die(who, "send");
      if (k > 0) sent += (size_t)k;
    }
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && got < n) {
      ssize_t k = recv(fd, rb + got, n - got, MSG_DONTWAIT);
      if (k == 0) die(who, "recv (peer closed)");
      if (k < 0 && errno != EAGAIN) die(who, "recv");
      if (k > 0) got += (size_t)k;
    }
  }
}

int main(int argc, char **argv) {
  size_t minb = 16u << 20, maxb = 256u << 20;
  int factor = 2, iters = 5, warm = 2, c;
  while ((c = getopt(argc, argv, "b:e:f:n:w:")) != -1) {
    switch (c) {
      case 'b': minb = parse_size(optarg); break;
      case 'e': maxb = parse_size(optarg); break;
      case 'f': factor = atoi(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'w': warm = atoi(optarg); break;
      default:
        fprintf(stderr, "usage: tcp_floor [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP]\n");
        return 1;
    }
  }
  if (minb == 0 || maxb < minb || factor < 2 || iters < 1 || warm < 0) {
    fprintf(stderr, "tcp_floor: need 0 < MINBYTES <= MAXBYTES, FACTOR >= 2, ITERS >= 1\n");
    return 1;
  }
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof(a);
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, 1) != 0 ||
      getsockname(ls, (struct sockaddr *)&a, &alen) != 0)
    die("setup", "listening on loopback");
  pid_t child = fork();
  if (child < 0) die("setup", "fork");
  int leader = child != 0, fd;
  const char *who = leader ? "rank 0" : "rank 1";
  if (leader) {
    fd = accept(ls, NULL, NULL);
  } else {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) fd = -1;
  }
  if (fd < 0) die(who, "connecting");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  cpu_set_t cs;
  CPU_ZERO(&cs);
  CPU_SET(leader ? 0 : 1, &cs);
  sched_setaffinity(0, sizeof(cs), &cs); /* as the perf tools bind 2 ranks; best effort */
  char *sb = malloc(maxb), *rb = malloc(maxb);
  if (sb == NULL || rb == NULL) die(who, "allocating the buffers");
  memset(sb, leader, maxb); /* first touch by their owner, as the perf tools do */
  memset(rb, 0, maxb);
  for (size_t s = minb; s <= maxb; s *= (size_t)factor) {
    double total = 0;
    for (int i = -warm; i < iters; i++) {
      handshake(fd, leader, who);
      double t0 = now_s();
      exchange(fd, sb, rb, s, who);
      if (i >= 0) total += now_s() - t0;
    }
    if (rb[s - 1] != (char)!leader) {
      fprintf(stderr, "tcp_floor: %s: received bytes are wrong\n", who);
      return 1;
    }
    double mean = total / iters;
    if (leader) printf("{\"size\": %zu, \"time_us\": %.2f, \"GBps\": %.3f}\n", s, mean * 1e6, (double)s / mean / 1e9);
    fflush(stdout);
    if (maxb / (size_t)factor < s) break;
  }
  close(fd);
  if (leader) {
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "tcp_floor: rank 1 failed\n");
      return 1;
    }
  }
  return 0;
}

/* ib_engine_bw: the ib protocol engine (transports/ib/ib_net.h) between two processes, as a
 * check and a figure. Over the verbs emulator the figure is EMULATED: it measures
 * process_vm_writev between two processes of this machine, nothing about InfiniBand.
 *
 *   ib_engine_bw [-b MIN] [-e MAX] [-n ITERS] [-w WINDOW] [-c]          forks both sides
 *   ib_engine_bw --role 0|1 --mailbox FILE [same options]               one side (e.g. in
 *                                                                          a network namespace)
 * Side 0 sends, side 1 receives. For each size from MIN to MAX (x4): ITERS messages with up
 * to WINDOW in flight, after ITERS/4 warm-up ones; bandwidth = size * ITERS / time (GB/s =
 * 1e9 B/s) measured by the receiver from its first posted receive to its last completion;
 * then an 8-byte ping-pong (half the median round trip, 200 rounds). -c checks every byte
 * (a pattern of size and message index) and the received sizes; exit status 1 on a wrong
 * byte or an error. The two sides swap their connection handles through FILE (a shared
 * mapping both can open, e.g. in /dev/shm: network namespaces share it). The job's secret
 * is WEFT_IB_BW_SECRET (32 hex digits) or a fixed test value. */
#include <getopt.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "lib/clock.h"
#include "weft.h"
#include "transports/ib/ib_net.h"

typedef struct {
  weft__ib_handle listen[2], conn[2], acc[2]; /* [maker] */
  atomic_int have_listen[2], have_conn[2], have_acc[2], ready[2];
  atomic_int pong;                            /* ping-pong turn counter */
} mailbox;

typedef struct {
  size_t min, max;
  int iters, window, check, role;
  const char *mailbox;
} options;

typedef struct {
  int role;
  mailbox *mb;
  weft__ib_opts o;
  weft__ib_listen_comm *lc;
  weft__ib_send_comm *sc;
  weft__ib_recv_comm *rc;
} side;

static int wait_flag(atomic_int *f, int v) {
  uint64_t end = weft__now_ns() + 20000000000ull;
  while (atomic_load(f) < v) {
    if (weft__now_ns() > end) return fprintf(stderr, "ib_engine_bw: the other side never came (20 s)\n"), -1;
    usleep(200);
  }
  return 0;
}

/* Both directions: side s listens, the other connects to it; one send and one recv comm each. */
static int connect_sides(side *s) {
  int me = s->role, peer = 1 - me;
  mailbox *mb = s->mb;
  if (weft__ib_listen(0, &s->o, &mb->listen[me], &s->lc) != WEFT_SUCCESS) return -1;
  atomic_store(&mb->have_listen[me], 1);
  if (wait_flag(&mb->have_listen[peer], 1) != 0 ||
      weft__ib_connect(0, &s->o, &mb->listen[peer], &mb->conn[me], &s->sc) != WEFT_SUCCESS)
    return -1;
  atomic_store(&mb->have_conn[me], 1);
  if (wait_flag(&mb->have_conn[peer], 1) != 0 ||
      weft__ib_accept(s->lc, &s->o, &mb->conn[peer], &mb->acc[me], &s->rc) != WEFT_SUCCESS)
    return -1;
  atomic_store(&mb->have_acc[me], 1);
  if (wait_flag(&mb->have_acc[peer], 1) != 0 || weft__ib_connect_finish(s->sc, &mb->acc[peer]) != WEFT_SUCCESS)
    return -1;
  return 0;
}

static uint8_t pat(size_t i, size_t size, int msg) { return (uint8_t)(i * 7 + size + (size_t)msg * 13); }

/* Waits for req; 0, or -1 with the engine's error printed. */
static int finish(weft__ib_request *req, size_t *got) {
  int done = 0;
  while (!done) {
    if (weft__ib_test(req, &done, got) != WEFT_SUCCESS) return -1;
    if (!done) sched_yield();
  }
  return 0;
}

static int check_msg(const uint8_t *buf, size_t size, size_t got, int msg) {
  if (got != size) return fprintf(stderr, "ib_engine_bw: message %d: %zu bytes, expected %zu\n", msg, got, size), -1;
  for (size_t i = 0; i < size; i++)
    if (buf[i] != pat(i, size, msg))
      return fprintf(stderr, "ib_engine_bw: %zu-byte message %d: byte %zu wrong\n", size, msg, i), -1;
  return 0;
}

/* Side 0: total messages of size from one buffer (refilled per message when checking). */
static int send_all(side *s, const options *o, uint8_t *buf, weft__ib_mr *mr, size_t size, int total) {
  weft__ib_request *reqs[64] = {0};
  for (int m = 0; m < total; m++) {
    weft__ib_request **slot = &reqs[m % o->window];
    if (*slot != NULL && finish(*slot, NULL) != 0) return -1;
    if (o->check) for (size_t i = 0; i < size; i++) buf[i] = pat(i, size, m);
    *slot = NULL;
    while (*slot == NULL) {
      if (weft__ib_isend(s->sc, buf, size, 0, mr, slot) != WEFT_SUCCESS) return -1;
      if (*slot == NULL) sched_yield();
    }
    if (o->check && finish(*slot, NULL) != 0) return -1; /* the buffer changes: one at a time */
    if (o->check) *slot = NULL;
  }
  for (int i = 0; i < o->window; i++)
    if (reqs[i] != NULL && finish(reqs[i], NULL) != 0) return -1;
  return 0;
}

/* Side 1: receives messages first.. into window buffers; returns the seconds from first post to last done. */
static double recv_all(side *s, const options *o, uint8_t **bufs, weft__ib_mr **mrs, size_t size, int first,
                       int total) {
  weft__ib_request *reqs[64] = {0};
  uint64_t t0 = weft__now_ns();
  int posted = 0, done = 0;
  while (done < total) {
    while (posted < total && posted - done < o->window) {
      weft__ib_request **slot = &reqs[posted % o->window];
      if (weft__ib_irecv(s->rc, bufs[posted % o->window], size, 0, mrs[posted % o->window], slot) != WEFT_SUCCESS)
        return -1;
      if (*slot == NULL) break;
      posted++;
    }
    size_t got = 0;
    if (finish(reqs[done % o->window], &got) != 0) return -1;
    if (o->check && check_msg(bufs[done % o->window], size, got, first + done) != 0) return -1;
    done++;
  }
  return (double)(weft__now_ns() - t0) / 1e9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* 8-byte ping-pong: side 0 sends, side 1 answers; half the median round trip in us. */
static double ping_pong(side *s, uint8_t *sb, uint8_t *rb, weft__ib_mr *smr, weft__ib_mr *rmr) {
  enum { ROUNDS = 200 };
  double rtt[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    weft__ib_request *rr = NULL, *sr = NULL;
    if (weft__ib_irecv(s->rc, rb, 8, 1, rmr, &rr) != WEFT_SUCCESS || rr == NULL) return -1;
    uint64_t t0 = weft__now_ns();
    if (s->role == 1 && finish(rr, NULL) != 0) return -1;
    while (sr == NULL) {
      if (weft__ib_isend(s->sc, sb, 8, 1, smr, &sr) != WEFT_SUCCESS) return -1;
      if (sr == NULL) sched_yield();
    }
    if (finish(sr, NULL) != 0 || (s->role == 0 && finish(rr, NULL) != 0)) return -1;
    rtt[i] = (double)(weft__now_ns() - t0) / 1e3;
  }
  qsort(rtt, ROUNDS, sizeof(double), cmp_d);
  return rtt[ROUNDS / 2] / 2;
}

static int run_size(side *s, const options *o, size_t size, uint8_t **bufs, weft__ib_mr **mrs) {
  int warm = o->iters / 4 > 0 ? o->iters / 4 : 1;
  if (s->role == 0) return send_all(s, o, bufs[0], mrs[0], size, warm + o->iters);
  if (recv_all(s, o, bufs, mrs, size, 0, warm) < 0) return -1;
  double sec = recv_all(s, o, bufs, mrs, size, warm, o->iters);
  if (sec < 0) return -1;
  printf("%12zu %8d %10.1f %10.3f\n", size, o->iters, sec * 1e6 / o->iters, (double)size * o->iters / sec / 1e9);
  fflush(stdout);
  return 0;
}

static int run(side *s, const options *o) {
  if (connect_sides(s) != 0) return fprintf(stderr, "ib_engine_bw: %s\n", weft_get_last_error(NULL)), 1;
  uint8_t *bufs[64];
  weft__ib_mr *mrs[64];
  int nbuf = s->role == 0 ? 1 : o->window;
  for (int i = 0; i < nbuf; i++) {
    bufs[i] = aligned_alloc(4096, (o->max + 4095) / 4096 * 4096);
    memset(bufs[i], 0, o->max);
    weft_status_t st = s->role == 0 ? weft__ib_reg_mr_send(s->sc, bufs[i], o->max, &mrs[i])
                                    : weft__ib_reg_mr_recv(s->rc, bufs[i], o->max, &mrs[i]);
    if (st != WEFT_SUCCESS) return fprintf(stderr, "ib_engine_bw: %s\n", weft_get_last_error(NULL)), 1;
  }
  if (s->role == 1) printf("# EMULATED if WEFT_IB_LIBRARY is the verbs emulator: not an InfiniBand figure\n"
                           "# %10s %8s %10s %10s\n", "size(B)", "iters", "time(us)", "GB/s");
  for (size_t size = o->min; size <= o->max; size *= 4)
    if (run_size(s, o, size, bufs, mrs) != 0) return fprintf(stderr, "ib_engine_bw: %s\n", weft_get_last_error(NULL)), 1;
  static uint8_t sb[8], rb[8];
  weft__ib_mr *smr, *rmr;
  if (weft__ib_reg_mr_send(s->sc, sb, 8, &smr) != WEFT_SUCCESS || weft__ib_reg_mr_recv(s->rc, rb, 8, &rmr) != WEFT_SUCCESS)
    return 1;
  double lat = ping_pong(s, sb, rb, smr, rmr);
  if (lat < 0) return fprintf(stderr, "ib_engine_bw: %s\n", weft_get_last_error(NULL)), 1;
  if (s->role == 1) printf("# 8-byte latency (half the median round trip): %.2f us\n", lat);
  fflush(stdout); /* the forked side leaves with _exit */
  atomic_fetch_add(&s->mb->ready[s->role], 1); /* leave together: the peer's last writes land */
  wait_flag(&s->mb->ready[1 - s->role], 1);
  /* Registrations and buffers go back before the comms close (LeakSanitizer reported the
   * buffers, 4-32 MiB per side, in make check-sanitize). */
  weft__ib_dereg_mr_send(s->sc, smr);
  weft__ib_dereg_mr_recv(s->rc, rmr);
  for (int i = 0; i < nbuf; i++) {
    if (s->role == 0) weft__ib_dereg_mr_send(s->sc, mrs[i]);
    else weft__ib_dereg_mr_recv(s->rc, mrs[i]);
    free(bufs[i]);
  }
  weft__ib_close_send(s->sc);
  weft__ib_close_recv(s->rc);
  weft__ib_close_listen(s->lc);
  return 0;
}

static size_t parse_size(const char *a) {
  char *end;
  double v = strtod(a, &end);
  size_t m = *end == 'K' ? 1u << 10 : *end == 'M' ? 1u << 20 : *end == 'G' ? 1u << 30 : 1;
  return (size_t)(v * (double)m);
}

static int parse(int argc, char **argv, options *o) {
  static const struct option longs[] = {{"role", required_argument, NULL, 'r'}, {"mailbox", required_argument, NULL, 'm'},
                                        {NULL, 0, NULL, 0}};
  *o = (options){.min = 4096, .max = 64u << 20, .iters = 40, .window = 8, .role = -1};
  int c;
  while ((c = getopt_long(argc, argv, "b:e:n:w:c", longs, NULL)) != -1) {
    switch (c) {
      case 'b': o->min = parse_size(optarg); break;
      case 'e': o->max = parse_size(optarg); break;
      case 'n': o->iters = atoi(optarg); break;
      case 'w': o->window = atoi(optarg); break;
      case 'c': o->check = 1; break;
      case 'r': o->role = atoi(optarg); break;
      case 'm': o->mailbox = optarg; break;
      default: return -1;
    }
  }
  if (o->min < 1 || o->max < o->min || o->iters < 1 || o->window < 1 || o->window > 32 ||
      (o->role >= 0 && (o->role > 1 || o->mailbox == NULL)))
    return -1;
  return 0;
}

static mailbox *map_mailbox(const char *path, int create) {
  int fd = open(path, O_RDWR | (create ? O_CREAT : 0), 0600);
  if (fd < 0 || (create && ftruncate(fd, sizeof(mailbox)) != 0)) return perror(path), NULL;
  mailbox *mb = mmap(NULL, sizeof(mailbox), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return mb == MAP_FAILED ? NULL : mb;
}

int main(int argc, char **argv) {
  options o;
  if (parse(argc, argv, &o) != 0) {
    fprintf(stderr, "usage: ib_engine_bw [-b MIN] [-e MAX] [-n ITERS] [-w WINDOW(<=32)] [-c] [--role 0|1 --mailbox FILE]\n");
    return 2;
  }
  const char *why;
  if (weft__ib_ports(NULL, &why) == 0) return fprintf(stderr, "ib_engine_bw: no ib port: %s\n", why), 1;
  static uint8_t secret[16] = {0x77, 0x65, 0x66, 0x74, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const char *hex = getenv("WEFT_IB_BW_SECRET");
  for (int i = 0; hex != NULL && strlen(hex) == 32 && i < 16; i++) sscanf(hex + 2 * i, "%2hhx", &secret[i]);
  side s = {.role = o.role};
  if (o.role < 0) { /* both sides here: a private shared mapping, one fork */
    s.mb = mmap(NULL, sizeof(mailbox), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(s.mb, 0, sizeof(mailbox));
    pid_t pid = fork();
    s.role = pid == 0 ? 1 : 0;
    s.o = (weft__ib_opts){secret, s.role ? "side 1" : "side 0", s.role ? "side 0" : "side 1", 30000};
    int rc = run(&s, &o);
    if (pid == 0) _exit(rc);
    int status = 0;
    waitpid(pid, &status, 0);
    return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  s.mb = map_mailbox(o.mailbox, 1); /* either side may come first: both create, same size */
  if (s.mb == NULL) return 1;
  s.o = (weft__ib_opts){secret, s.role ? "side 1" : "side 0", s.role ? "side 0" : "side 1", 30000};
  return run(&s, &o);
}

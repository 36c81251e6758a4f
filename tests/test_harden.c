/* test_harden.c: the failures issue 15 found, each made to fail fast and name its cause.
 *
 * Placement probe (transports/shm/shm_placement.c): the first 2-rank all-reduce of 256 KiB
 * over shm runs the probe, which waits for its partner; a dead partner must fail it in
 * milliseconds naming the partner, weft_comm_abort from another thread must end it, and a
 * partner that does not come must be waited for asleep, not at 100% CPU.
 *
 * The environment (lib/env.c, lib/comm_env.c, lib/connect.c): values a cast or a lax parser
 * used to misread (WEFT_TIMEOUT_MS=4294967297 became 1 ms, ports above 65535, a WEFT_SECRET
 * sscanf half-read, WEFT_SOCKET_BUFFER_BYTES=4096) are refused at once naming the variable
 * and the valid range; ranks that disagree on WEFT_TRANSPORT fail at init, not at the
 * timeout; an operation whose bytes only trickle (its peer stopped and continued again and
 * again) ends at the timeout, counted for the whole operation.
 *
 * The bootstrap root (lib/bootstrap_root.c): 1,100 idle connections and clients that send
 * 2 bytes and stop must neither lock real ranks out nor delay them; out of descriptors
 * (RLIMIT_NOFILE) it must not spin and must still admit ranks; an authenticated hello
 * claiming 10^8 ranks is refused, and one claiming 10^7 costs the root almost nothing.
 *
 * Secrets: transports/shm/tests/test_shm_secret.c (it reaches the shm transport's own
 * socket functions, which only files of transports/shm/ may include).
 *
 * Blame: when rank 0, whose process hosts the root, dies, the survivors (which give up and
 * leave at once, as real jobs do) must name rank 0, not each other. */
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/bootstrap.h"
#include "lib/bootstrap_wire.h"
#include "tests/harness.h"

#define PROBE_COUNT (256 * 1024 / 4) /* float32 elements: the probe's threshold */
#define FLAG_DONE 0                  /* flags[0]: rank 0 is done, the partner may leave */

/* A small all-reduce that must work: the communicator is up on both ranks. */
static int small_all_reduce(harness_rank *r) {
  float v[16] = {0};
  return harness_expect_status(r, weft_all_reduce(v, v, 16, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL),
                               WEFT_SUCCESS, "warm-up all_reduce of 16 float32");
}

/* CPU seconds this process used so far (user + system). */
static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

/* Rank 0's probing all-reduce; returns its status and fills ms and cpu. */
static weft_status_t probing_all_reduce(harness_rank *r, double *ms, double *cpu) {
  float *b = calloc(PROBE_COUNT, sizeof(float));
  double t0 = harness_now_ms(), c0 = cpu_s();
  weft_status_t st = weft_all_reduce(b, b, PROBE_COUNT, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
  *ms = harness_now_ms() - t0;
  *cpu = cpu_s() - c0;
  free(b);
  return st;
}

/* Rank 1 exits; rank 0's probe must fail within 2 s (timeout 20 s) naming rank 1. */
static int dead_partner_body(harness_rank *r) {
  if (!small_all_reduce(r)) return r->failures;
  if (r->rank == 1) _exit(0);
  double ms, cpu;
  weft_status_t st = probing_all_reduce(r, &ms, &cpu);
  const char *msg = weft_get_last_error(r->comm);
  if (st != WEFT_ERR_REMOTE)
    harness_fail(r, "256 KiB all_reduce with rank 1 gone returned %s: \"%s\"", harness_status_name(st), msg);
  if (ms > 2000) harness_fail(r, "it failed only after %.0f ms (timeout %d ms)", ms, r->config.timeout_ms);
  if (!harness_names_rank(msg, 1)) harness_fail(r, "the error does not name rank 1: \"%s\"", msg);
  harness_note(r, "failed after %.0f ms: \"%s\"", ms, msg);
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

static void placement_probe_with_a_dead_partner_fails_in_ms_naming_it(void **state) {
  harness_opts o = {.nranks = 2, .transport = "shm", .timeout_ms = 20000, .deadline_s = 60};
  harness_run(&o, dead_partner_body, NULL);
}

static void *abort_later(void *arg) {
  harness_sleep_ms(300);
  weft_comm_abort(arg);
  return NULL;
}

/* Rank 1 stays alive but never joins; rank 0 aborts from another thread after 300 ms. */
static int abort_body(harness_rank *r) {
  if (!small_all_reduce(r)) return r->failures;
  if (r->rank == 1) {
    harness_wait_flag(r, FLAG_DONE, 1, 30000);
    weft_comm_abort(r->comm);
    r->comm = NULL;
    return r->failures;
  }
  pthread_t t;
  pthread_create(&t, NULL, abort_later, r->comm);
  double ms, cpu;
  weft_status_t st = probing_all_reduce(r, &ms, &cpu);
  if (st == WEFT_SUCCESS) harness_fail(r, "256 KiB all_reduce succeeded with rank 1 absent");
  if (ms > 2300) harness_fail(r, "an abort 300 ms into the call ended it only after %.0f ms", ms);
  harness_note(r, "ended after %.0f ms with %s", ms, harness_status_name(st));
  pthread_join(t, NULL);
  r->comm = NULL; /* destroyed by the abort */
  atomic_store(&r->shared->flags[FLAG_DONE], 1);
  return r->failures;
}

static void placement_probe_ends_at_an_abort_from_another_thread(void **state) {
  harness_opts o = {.nranks = 2, .transport = "shm", .timeout_ms = 20000, .deadline_s = 60};
  harness_run(&o, abort_body, NULL);
}

/* Rank 1 stays alive but never joins: rank 0 times out after 1.5 s, using well under one
 * core meanwhile (spinning used 100%). */
static int absent_partner_body(harness_rank *r) {
  if (!small_all_reduce(r)) return r->failures;
  if (r->rank == 1) {
    harness_wait_flag(r, FLAG_DONE, 1, 30000);
    weft_comm_abort(r->comm);
    r->comm = NULL;
    return r->failures;
  }
  double ms, cpu;
  weft_status_t st = probing_all_reduce(r, &ms, &cpu);
  if (st != WEFT_ERR_TIMEOUT) harness_fail(r, "256 KiB all_reduce with rank 1 absent returned %s: \"%s\"",
                                           harness_status_name(st), weft_get_last_error(r->comm));
  if (cpu > 0.3 * ms / 1000)
    harness_fail(r, "waiting %.0f ms for the probe's partner used %.0f ms of CPU", ms, cpu * 1000);
  harness_note(r, "timed out after %.0f ms using %.0f ms of CPU", ms, cpu * 1000);
  atomic_store(&r->shared->flags[FLAG_DONE], 1);
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

static void placement_probe_waits_for_an_absent_partner_without_spinning(void **state) {
  harness_opts o = {.nranks = 2, .transport = "shm", .timeout_ms = 1500, .deadline_s = 60};
  harness_run(&o, absent_partner_body, NULL);
}

/* ---- the environment ---------------------------------------------------------------- */

/* st must be WEFT_ERR_INVALID_USAGE or _ARGUMENT with a last error mentioning each word. */
static void expect_refusal(weft_status_t st, const char *what, const char *w1, const char *w2) {
  const char *msg = weft_get_last_error(NULL);
  if (st != WEFT_ERR_INVALID_USAGE && st != WEFT_ERR_INVALID_ARGUMENT)
    fail_msg("%s returned %s (\"%s\"), expected a refusal", what, harness_status_name(st), msg);
  if (strstr(msg, w1) == NULL || (w2 != NULL && strstr(msg, w2) == NULL))
    fail_msg("%s: the error \"%s\" does not mention \"%s\" and \"%s\"", what, msg, w1, w2 ? w2 : "");
  printf("# %s: \"%s\"\n", what, msg);
}

static void a_timeout_beyond_int_is_refused_naming_the_variable(void **state) {
  weft_unique_id_t id;
  setenv("WEFT_TIMEOUT_MS", "4294967297", 1);
  weft_status_t st = weft_get_unique_id(&id);
  unsetenv("WEFT_TIMEOUT_MS");
  expect_refusal(st, "weft_get_unique_id with WEFT_TIMEOUT_MS=4294967297", "WEFT_TIMEOUT_MS", "2147483647");
  setenv("WEFT_TIMEOUT_MS", "0", 1);
  assert_int_equal(weft_get_unique_id(&id) == WEFT_SUCCESS, 0);
  unsetenv("WEFT_TIMEOUT_MS");
}

/* init_from_env as rank 1 of 2 under torchrun's variables, with the given extra ones. */
static weft_status_t init_as_torchrun_rank(const char *rank, const char *port, const char *secret) {
  setenv("RANK", rank, 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", port, 1);
  if (secret) setenv("WEFT_SECRET", secret, 1);
  weft_comm_t comm = NULL;
  double t0 = harness_now_ms();
  weft_status_t st = weft_comm_init_from_env(&comm, NULL);
  double ms = harness_now_ms() - t0;
  if (comm != NULL) weft_comm_destroy(comm);
  unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");
  unsetenv("WEFT_SECRET");
  if (ms > 1000) fail_msg("init from the environment took %.0f ms to fail", ms);
  return st;
}

static void ports_outside_1_to_65535_are_refused_naming_the_variable(void **state) {
  expect_refusal(init_as_torchrun_rank("1", "70000", NULL), "MASTER_PORT=70000", "MASTER_PORT", "65535");
  expect_refusal(init_as_torchrun_rank("1", "0", NULL), "MASTER_PORT=0", "MASTER_PORT", "65535");
  expect_refusal(init_as_torchrun_rank("1", "12x", NULL), "MASTER_PORT=12x", "MASTER_PORT", "65535");
}

static void a_malformed_secret_is_refused(void **state) {
  /* 32 characters that sscanf("%2x") read as 16 bytes */
  expect_refusal(init_as_torchrun_rank("1", "29500", "+f+f+f+f+f+f+f+f+f+f+f+f+f+f+f+f"),
                 "WEFT_SECRET=+f+f...", "WEFT_SECRET", "32 hex digits");
  expect_refusal(init_as_torchrun_rank("1", "29500", " 1 2 3 4 5 6 7 8 9 a b c d e f 0"),
                 "WEFT_SECRET with blanks", "WEFT_SECRET", "32 hex digits");
}

/* Each rank sets its own WEFT_TRANSPORT before init: rank 0 shm, rank 1 socket. */
static int transport_mismatch_body(harness_rank *r) {
  setenv("WEFT_TRANSPORT", r->rank == 0 ? "shm" : "socket", 1);
  double t0 = harness_now_ms();
  weft_status_t st = weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config);
  double ms = harness_now_ms() - t0;
  const char *msg = weft_get_last_error(NULL);
  if (st != WEFT_ERR_INVALID_USAGE || strstr(msg, "WEFT_TRANSPORT") == NULL)
    harness_fail(r, "init with WEFT_TRANSPORT shm on rank 0 and socket on rank 1 returned %s: \"%s\"",
                 harness_status_name(st), msg);
  if (ms > 3000) harness_fail(r, "the mismatch was found only after %.0f ms (timeout %d ms)", ms,
                              r->config.timeout_ms);
  harness_note(r, "init failed after %.0f ms: \"%s\"", ms, msg);
  if (st == WEFT_SUCCESS) weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

static void ranks_disagreeing_on_weft_transport_fail_at_init(void **state) {
  harness_opts o = {.nranks = 2, .timeout_ms = 20000, .deadline_s = 60, .no_init = 1};
  harness_run(&o, transport_mismatch_body, NULL);
}

static int tiny_socket_buffer_body(harness_rank *r) {
  setenv("WEFT_SOCKET_BUFFER_BYTES", "4096", 1);
  weft_status_t st = weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config);
  const char *msg = weft_get_last_error(NULL);
  if (st == WEFT_SUCCESS || strstr(msg, "WEFT_SOCKET_BUFFER_BYTES") == NULL)
    harness_fail(r, "init with WEFT_SOCKET_BUFFER_BYTES=4096 returned %s: \"%s\"", harness_status_name(st), msg);
  harness_note(r, "init returned %s: \"%s\"", harness_status_name(st), msg);
  if (st == WEFT_SUCCESS) weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

static void a_socket_buffer_too_small_to_move_data_is_refused(void **state) {
  harness_opts o = {.nranks = 2, .transport = "socket", .timeout_ms = 5000, .deadline_s = 60, .no_init = 1};
  harness_run(&o, tiny_socket_buffer_body, NULL);
}

/* Rank 0 stops rank 1 for 150 ms and lets it run 1 ms, again and again, during a 64 MiB
 * all-reduce over sockets: bytes keep trickling, so only a bound on the whole operation
 * (timeout 1 s) ends it. Measured before that bound: the call ran on for many seconds. */
typedef struct {
  pid_t victim;
  atomic_int stop;
} stutter_arg;

static void *stutter(void *p) {
  stutter_arg *a = p;
  while (!atomic_load(&a->stop)) {
    kill(a->victim, SIGSTOP);
    harness_sleep_ms(150);
    kill(a->victim, SIGCONT);
    harness_sleep_ms(1);
  }
  kill(a->victim, SIGCONT);
  return NULL;
}

#define TRICKLE_COUNT ((size_t)16 << 20)

static int trickle_body(harness_rank *r) {
  if (!small_all_reduce(r)) return r->failures;
  float *b = calloc(TRICKLE_COUNT, sizeof(float));
  if (r->rank == 1) {
    atomic_store(&r->shared->values[0], (long long)getpid());
    atomic_store(&r->shared->flags[1], 1);
    weft_all_reduce(b, b, TRICKLE_COUNT, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    harness_wait_flag(r, FLAG_DONE, 1, 60000);
  } else {
    harness_wait_flag(r, 1, 1, 10000);
    stutter_arg a = {.victim = (pid_t)atomic_load(&r->shared->values[0])};
    pthread_t t;
    pthread_create(&t, NULL, stutter, &a);
    double t0 = harness_now_ms();
    weft_status_t st = weft_all_reduce(b, b, TRICKLE_COUNT, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    double ms = harness_now_ms() - t0;
    atomic_store(&a.stop, 1);
    pthread_join(t, NULL);
    if (st != WEFT_ERR_TIMEOUT)
      harness_fail(r, "a 64 MiB all_reduce with its peer stuttering returned %s after %.0f ms: \"%s\"",
                   harness_status_name(st), ms, weft_get_last_error(r->comm));
    if (ms > r->config.timeout_ms + 1500)
      harness_fail(r, "it ended only after %.0f ms (timeout %d ms)", ms, r->config.timeout_ms);
    harness_note(r, "ended after %.0f ms with %s: \"%s\"", ms, harness_status_name(st),
                 weft_get_last_error(r->comm));
    atomic_store(&r->shared->flags[FLAG_DONE], 1);
  }
  free(b);
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

static void an_operation_whose_bytes_trickle_ends_at_the_timeout(void **state) {
  harness_opts o = {.nranks = 2, .transport = "socket", .timeout_ms = 1000, .deadline_s = 90};
  harness_run(&o, trickle_body, NULL);
}

/* ---- the bootstrap root -------------------------------------------------------------- */

/* A TCP connection to the root of id; -1 on failure. */
static int connect_to_root(const weft_unique_id_t *id) {
  const weft__id_layout *l = (const weft__id_layout *)id->internal;
  weft__sockaddr a;
  weft__id_get_root(l, &a);
  int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&a.ss, a.len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static int init_body(harness_rank *r) {
  double t0 = harness_now_ms();
  weft_status_t st = weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config);
  double ms = harness_now_ms() - t0;
  if (!harness_expect_status(r, st, WEFT_SUCCESS, "init while strangers crowd the root")) {
    r->comm = NULL;
    return r->failures;
  }
  if (ms > 3000) harness_fail(r, "init took %.0f ms", ms);
  harness_note(r, "init took %.0f ms", ms);
  small_all_reduce(r);
  return r->failures;
}

/* 1,100 idle connections and 3 that send 2 bytes of a header and stop, then 2 real ranks. */
static void idle_and_slow_connections_do_not_keep_ranks_from_the_root(void **state) {
  enum { IDLE = 1100, SLOW = 3 };
  weft_unique_id_t id;
  harness_unique_id(&id); /* its root runs in a child: this program stays single-threaded */
  int fds[IDLE + SLOW], n = 0;
  for (int i = 0; i < IDLE + SLOW; i++) {
    int fd = connect_to_root(&id);
    if (fd < 0) break;
    if (i >= IDLE) (void)!write(fd, "\x01\x00", 2);
    fds[n++] = fd;
  }
  if (n < IDLE + SLOW) fail_msg("opened only %d connections to the root", n);
  harness_sleep_ms(200); /* let the root take them all in */
  harness_opts o = {.nranks = 2, .transport = "socket", .timeout_ms = 20000, .deadline_s = 60, .no_init = 1, .id = &id};
  harness_run(&o, init_body, NULL);
  for (int i = 0; i < n; i++) close(fds[i]);
}

static pid_t root_child = -1; /* killed by the teardown even when a check failed */

static int kill_root_child(void **state) {
  if (root_child > 0) {
    kill(root_child, SIGKILL);
    waitpid(root_child, NULL, 0);
  }
  root_child = -1;
  return 0;
}

/* The root lives in a child process limited to 48 descriptors, flooded with 100 idle
 * connections: it must use little CPU meanwhile and still admit 2 ranks. */
static void a_root_out_of_descriptors_does_not_spin_and_still_admits_ranks(void **state) {
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  int go[2];
  assert_int_equal(pipe(go), 0);
  pid_t child = root_child = fork();
  if (child == 0) {
    struct rlimit rl = {48, 48};
    setrlimit(RLIMIT_NOFILE, &rl);
    weft_unique_id_t cid;
    if (weft_get_unique_id(&cid) != WEFT_SUCCESS) _exit(2);
    (void)!write(pipefd[1], &cid, sizeof cid);
    char c;
    (void)!read(go[0], &c, 1); /* the flood is in */
    double c0 = cpu_s();
    harness_sleep_ms(1000);
    double used = cpu_s() - c0;
    (void)!write(pipefd[1], &used, sizeof used);
    harness_sleep_ms(30000); /* host the root until killed */
    _exit(0);
  }
  weft_unique_id_t id;
  assert_int_equal(read(pipefd[0], &id, sizeof id), (ssize_t)sizeof id);
  int fds[100], n = 0;
  for (int i = 0; i < 100; i++)
    if ((fds[n] = connect_to_root(&id)) >= 0) n++;
  harness_sleep_ms(100);
  (void)!write(go[1], "g", 1);
  double used = -1;
  (void)!read(pipefd[0], &used, sizeof used);
  printf("# the root's process used %.0f ms of CPU in 1 s with %d connections and 48 descriptors\n",
         used * 1000, n);
  harness_opts o = {.nranks = 2, .transport = "socket", .timeout_ms = 20000, .deadline_s = 60, .no_init = 1, .id = &id};
  harness_run(&o, init_body, NULL);
  kill_root_child(NULL);
  for (int i = 0; i < n; i++) close(fds[i]);
  close(pipefd[0]), close(pipefd[1]), close(go[0]), close(go[1]);
  if (used < 0 || used > 0.2) fail_msg("the root's process used %.0f ms of CPU in 1 s", used * 1000);
}

/* Sends an authenticated hello claiming rank `rank` of `nranks`; returns the fd. */
static int hello_claiming(const weft_unique_id_t *id, int rank, int nranks) {
  const weft__id_layout *l = (const weft__id_layout *)id->internal;
  int fd = connect_to_root(id);
  assert_true(fd >= 0);
  struct {
    weft__bs_header h;
    weft__bs_hello b;
  } m;
  memset(&m, 0, sizeof m);
  m.h = (weft__bs_header){WEFT__BS_HELLO, sizeof(m.b)};
  m.b.magic = WEFT__ID_MAGIC;
  memcpy(m.b.secret, l->secret, 16);
  m.b.rank = rank;
  m.b.nranks = nranks;
  m.b.timeout_ms = 5000;
  assert_int_equal(write(fd, &m, sizeof m), (ssize_t)sizeof m);
  return fd;
}

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  if (f != NULL) fclose(f);
  return kib;
}

/* What the root's process saw, measured in a child that hosts the root (the test program
 * itself stays single-threaded: later tests fork ranks, tests/harness.h). */
typedef struct {
  int answered, refused; /* the 10^8 hello got an answer within 2 s; it was a refusal */
  long grown_kib;        /* the root's process grew by this while 2 ranks of 10^7 joined */
  double used_s;         /* CPU seconds the root's process used meanwhile (0.8 s) */
} huge_nranks_report;

static void huge_nranks_in_child(int out) {
  huge_nranks_report rep = {0};
  weft_unique_id_t id;
  if (weft_get_unique_id(&id) != WEFT_SUCCESS) _exit(2);
  int fd = hello_claiming(&id, 5, 100000000);
  struct pollfd p = {fd, POLLIN, 0};
  weft__bs_header h;
  rep.answered = poll(&p, 1, 2000) == 1;
  rep.refused = rep.answered && recv(fd, &h, sizeof h, MSG_WAITALL) == (ssize_t)sizeof h &&
                h.type == WEFT__BS_REJECT;
  close(fd);
  if (weft_get_unique_id(&id) != WEFT_SUCCESS) _exit(2);
  long rss0 = rss_kib();
  double c0 = cpu_s();
  int a = hello_claiming(&id, 3, 10000000);
  harness_sleep_ms(300);
  int b = hello_claiming(&id, 9999999, 10000000); /* two far-apart pages */
  harness_sleep_ms(500);
  rep.grown_kib = rss_kib() - rss0;
  rep.used_s = cpu_s() - c0;
  close(a);
  close(b);
  (void)!write(out, &rep, sizeof rep);
  _exit(0);
}

static void a_hello_claiming_huge_nranks_is_bounded_and_costs_the_root_little(void **state) {
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) huge_nranks_in_child(pipefd[1]);
  close(pipefd[1]);
  huge_nranks_report rep;
  ssize_t got = read(pipefd[0], &rep, sizeof rep);
  close(pipefd[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (got != (ssize_t)sizeof rep) fail_msg("the root's process ended without a report (wait status %d)", status);
  if (!rep.answered) fail_msg("no answer within 2 s to a hello claiming 10^8 ranks");
  if (!rep.refused) fail_msg("a hello claiming 10^8 ranks was not refused");
  printf("# 10^7 ranks claimed: the root grew by %ld KiB and used %.0f ms of CPU in 0.8 s\n", rep.grown_kib,
         rep.used_s * 1000);
  if (rep.grown_kib > 32 * 1024) fail_msg("the root grew by %ld KiB for 2 ranks of a claimed 10^7", rep.grown_kib);
  if (rep.used_s > 0.25) fail_msg("the root used %.0f ms of CPU in 0.8 s", rep.used_s * 1000);
}

/* ---- blame ---------------------------------------------------------------------------- */

/* Rank 0 makes the id (the root lives in its process) and hands it over through shared. */
static int init_with_root_in_rank0(harness_rank *r) {
  if (r->rank == 0) {
    if (!harness_expect_status(r, weft_get_unique_id(&r->id), WEFT_SUCCESS, "weft_get_unique_id")) return -1;
    memcpy((void *)r->shared->values, &r->id, sizeof r->id);
    atomic_store(&r->shared->flags[1], 1);
  } else {
    if (!harness_wait_flag(r, 1, 1, 10000)) return harness_fail(r, "rank 0 never made the id"), -1;
    memcpy(&r->id, (void *)r->shared->values, sizeof r->id);
  }
  weft_status_t st = weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config);
  if (!harness_expect_status(r, st, WEFT_SUCCESS, "init with the root in rank 0")) {
    r->comm = NULL;
    return -1;
  }
  return 0;
}

/* Rank 0 exits before an all-reduce; each survivor, at its error, leaves at once. */
static int root_rank_dies_body(harness_rank *r) {
  if (init_with_root_in_rank0(r) != 0) return r->failures;
  if (!small_all_reduce(r)) return r->failures;
  if (r->rank == 0) _exit(0);
  float v[4097] = {0};
  weft_status_t st = weft_all_reduce(v, v, 4097, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
  const char *msg = weft_get_last_error(r->comm);
  if (st == WEFT_SUCCESS) harness_fail(r, "all_reduce succeeded with rank 0 gone");
  else if (!harness_names_rank(msg, 0)) harness_fail(r, "rank 0 died, but the error blames another: \"%s\"", msg);
  else harness_note(r, "%s: \"%s\"", harness_status_name(st), msg);
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

static void when_rank_0_dies_with_the_root_survivors_name_rank_0(void **state) {
  const char *transports[] = {"socket", "shm"};
  for (int k = 0; k < 6; k++) {
    harness_opts o = {.nranks = k % 3 == 2 ? 4 : 3, .transport = transports[k % 2], .timeout_ms = 10000,
                      .deadline_s = 60, .no_init = 1};
    harness_run(&o, root_rank_dies_body, NULL);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(placement_probe_with_a_dead_partner_fails_in_ms_naming_it),
      cmocka_unit_test(placement_probe_ends_at_an_abort_from_another_thread),
      cmocka_unit_test(placement_probe_waits_for_an_absent_partner_without_spinning),
      cmocka_unit_test(a_timeout_beyond_int_is_refused_naming_the_variable),
      cmocka_unit_test(ports_outside_1_to_65535_are_refused_naming_the_variable),
      cmocka_unit_test(a_malformed_secret_is_refused),
      cmocka_unit_test(ranks_disagreeing_on_weft_transport_fail_at_init),
      cmocka_unit_test(a_socket_buffer_too_small_to_move_data_is_refused),
      cmocka_unit_test(an_operation_whose_bytes_trickle_ends_at_the_timeout),
      cmocka_unit_test(idle_and_slow_connections_do_not_keep_ranks_from_the_root),
      cmocka_unit_test_teardown(a_root_out_of_descriptors_does_not_spin_and_still_admits_ranks, kill_root_child),
      cmocka_unit_test(a_hello_claiming_huge_nranks_is_bounded_and_costs_the_root_little),
      cmocka_unit_test(when_rank_0_dies_with_the_root_survivors_name_rank_0),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}

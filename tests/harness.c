/* harness.c: runs a test body as N real rank processes (see harness.h for why and how).
 *
 * Order of events in harness_run: map the shared page, fork the ranks (each blocks reading
 * the id from its socketpair), create the unique id, send it to every rank, then reap the
 * ranks until the deadline.
 *
 * The parent forks only while it is single-threaded. A thread alive at fork time may hold a
 * lock (glibc's malloc has fork handlers, but ASan's allocator of GCC 12 / clang 14 has
 * none: a forked rank then deadlocked in malloc, test_bad_input case 5 in 2 of 15 ASan
 * runs). So the parent never runs a bootstrap root itself: the id is made by a "root host"
 * child (root_host_start), forked like the ranks, which keeps the root thread until the run
 * is reaped; tests that need an id outside a run get one the same way (harness_unique_id).
 * check_single_threaded fails the test, naming the thread count, if a thread is alive. */
#include "tests/harness.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "mem/guarded.h"
#include "mem/kernels.h"

/* Why a rank did not exit 0: exit codes the rank itself chooses. */
#define HARNESS_EXIT_CAP 100

double harness_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void harness_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

const char *harness_status_name(weft_status_t st) {
  switch (st) {
#define HARNESS_NAME_(name, value, text) \
  case name:                             \
    return #name;
    WEFT_STATUS_LIST(HARNESS_NAME_)
#undef HARNESS_NAME_
  default:
    return "(unknown status)";
  }
}

size_t harness_esize(weft_datatype_t dt) {
  static const size_t sz[WEFT_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return (unsigned)dt < WEFT_NUM_DATATYPES ? sz[dt] : 0;
}

const char *harness_dt_name(weft_datatype_t dt) {
  static const char *names[WEFT_NUM_DATATYPES] = {"int8",    "uint8",   "int32",  "uint32",
                                                  "int64",   "uint64",  "float16", "float32",
                                                  "float64", "bfloat16"};
  return (unsigned)dt < WEFT_NUM_DATATYPES ? names[dt] : "(bad dtype)";
}

const char *harness_op_name(weft_redop_t op) {
  static const char *names[WEFT_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};
  return (unsigned)op < WEFT_NUM_OPS ? names[op] : "(bad op)";
}

/* Elements are copied with memcpy: the sweeps place buffers at any byte offset (weft must
 * take them there), and a typed access to a misaligned element is undefined behaviour
 * (UBSan in make check-sanitize flagged 220 of them here). */
#define HARNESS_PUT_(type, value)                 \
  do {                                            \
    type x_ = (type)(value);                      \
    memcpy((char *)p + i * sizeof x_, &x_, sizeof x_); \
  } while (0)
#define HARNESS_GET_(type, out)                   \
  do {                                            \
    type x_;                                      \
    memcpy(&x_, (const char *)p + i * sizeof x_, sizeof x_); \
    out = x_;                                     \
  } while (0)

void harness_store(void *p, size_t i, weft_datatype_t dt, long v) {
  switch (dt) {
  case WEFT_INT8: HARNESS_PUT_(int8_t, v); break;
  case WEFT_UINT8: HARNESS_PUT_(uint8_t, v); break;
  case WEFT_INT32: HARNESS_PUT_(int32_t, v); break;
  case WEFT_UINT32: HARNESS_PUT_(uint32_t, v); break;
  case WEFT_INT64: HARNESS_PUT_(int64_t, v); break;
  case WEFT_UINT64: HARNESS_PUT_(uint64_t, v); break;
  case WEFT_FLOAT16: HARNESS_PUT_(uint16_t, weft__float_to_half((float)v)); break;
  case WEFT_FLOAT32: HARNESS_PUT_(float, v); break;
  case WEFT_FLOAT64: HARNESS_PUT_(double, v); break;
  case WEFT_BFLOAT16: HARNESS_PUT_(uint16_t, weft__float_to_bf16((float)v)); break;
  default: break;
  }
}

double harness_load(const void *p, size_t i, weft_datatype_t dt) {
  double out = 0;
  uint16_t h;
  switch (dt) {
  case WEFT_INT8: HARNESS_GET_(int8_t, out); break;
  case WEFT_UINT8: HARNESS_GET_(uint8_t, out); break;
  case WEFT_INT32: HARNESS_GET_(int32_t, out); break;
  case WEFT_UINT32: HARNESS_GET_(uint32_t, out); break;
  case WEFT_INT64: HARNESS_GET_(int64_t, out); break;
  case WEFT_UINT64: HARNESS_GET_(uint64_t, out); break;
  case WEFT_FLOAT16: HARNESS_GET_(uint16_t, h); out = weft__half_to_float(h); break;
  case WEFT_FLOAT32: HARNESS_GET_(float, out); break;
  case WEFT_FLOAT64: HARNESS_GET_(double, out); break;
  case WEFT_BFLOAT16: HARNESS_GET_(uint16_t, h); out = weft__bf16_to_float(h); break;
  default: break;
  }
  return out;
}

static void vreport(harness_rank *r, const char *fmt, va_list ap) {
  char line[2048];
  int n = snprintf(line, sizeof line, "# rank %d/%d%s%s: ", r->rank, r->nranks,
                   r->transport ? " over " : "", r->transport ? r->transport : "");
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  /* One write per line so lines of concurrent ranks do not interleave. */
  size_t len = strlen(line);
  if (len < sizeof line - 1) line[len++] = '\n';
  ssize_t w = write(2, line, len);
  (void)w;
}

int harness_fail(harness_rank *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(r, fmt, ap);
  va_end(ap);
  r->failures++;
  return 0;
}

void harness_note(harness_rank *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(r, fmt, ap);
  va_end(ap);
}

int harness_expect_status(harness_rank *r, weft_status_t st, weft_status_t want,
                          const char *what) {
  if (st == want) return 1;
  harness_fail(r, "%s: returned %s, expected %s; last error: \"%s\"", what,
               harness_status_name(st), harness_status_name(want),
               weft_get_last_error(r->comm));
  return 0;
}

int harness_wait_flag(harness_rank *r, int idx, int value, int timeout_ms) {
  double end = harness_now_ms() + timeout_ms;
  while (atomic_load(&r->shared->flags[idx]) < value) {
    if (harness_now_ms() > end) return 0;
    harness_sleep_ms(1);
  }
  return 1;
}

/* Is the word ending just before msg[pos] one that introduces rank numbers? */
static int word_names_ranks(const char *msg, size_t pos) {
  static const char *words[] = {"rank", "ranks", "peer", "peers", "missing", "rank(s)"};
  size_t end = pos;
  while (pos > 0 && (isalpha((unsigned char)msg[pos - 1]) || msg[pos - 1] == '(' ||
                     msg[pos - 1] == ')'))
    pos--;
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (end - pos == strlen(words[i]) && strncasecmp(msg + pos, words[i], end - pos) == 0)
      return 1;
  return 0;
}

int harness_names_rank(const char *msg, int rank) {
  char want[16];
  snprintf(want, sizeof want, "%d", rank);
  size_t wl = strlen(want);
  for (size_t i = 0; msg[i]; i++) {
    if (strncmp(msg + i, want, wl) != 0) continue;
    if (i > 0 && isalnum((unsigned char)msg[i - 1])) continue;
    if (isalnum((unsigned char)msg[i + wl])) continue;
    /* Walk back over a list such as "ranks 0, 2 and 1" to the word before it. */
    size_t p = i;
    for (;;) {
      while (p > 0 && strchr(" \t,:=[({0123456789", msg[p - 1])) p--;
      if (p >= 3 && strncasecmp(msg + p - 3, "and", 3) == 0) { p -= 3; continue; }
      if (p >= 2 && strncasecmp(msg + p - 2, "or", 2) == 0) { p -= 2; continue; }
      break;
    }
    if (p > 0 && word_names_ranks(msg, p)) return 1;
  }
  return 0;
}

int harness_init_on_emulated_host(harness_rank *r, const char *hosts) {
  char id[32];
  snprintf(id, sizeof id, "weft-test-host-%c", hosts[r->rank]);
  setenv("WEFT_HOSTID", id, 1);
  weft_status_t st = weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config);
  if (st == WEFT_SUCCESS) return 0;
  r->comm = NULL;
  return harness_fail(r, "init on host %s: %s: \"%s\"", id, harness_status_name(st), weft_get_last_error(NULL));
}

/* ---- guarded buffers and cross-rank checks -------------------------------------------- */

static int guarded_memory;

void harness_use_guarded_memory(int on) { guarded_memory = on; }
int harness_guarded_memory(void) { return guarded_memory; }

uint8_t *harness_view(const void *p, size_t bytes) {
  if (p == NULL || bytes == 0 || !weft__mem_guarded.owns(&weft__mem_guarded, p)) return (uint8_t *)p;
  return weft__mem_guarded.host_view(&weft__mem_guarded, p, bytes);
}

uint8_t *harness_guarded_alloc(size_t bytes, uint8_t fill) {
  void *m = NULL;
  if (guarded_memory) {
    if (weft__mem_guarded.alloc(&weft__mem_guarded, bytes + 2 * HARNESS_GUARD, &m) != WEFT_SUCCESS) abort();
  } else if ((m = malloc(bytes + 2 * HARNESS_GUARD)) == NULL) {
    abort();
  }
  uint8_t *b = harness_view(m, bytes + 2 * HARNESS_GUARD);
  memset(b, HARNESS_GUARD_BYTE, HARNESS_GUARD);
  memset(b + HARNESS_GUARD, fill, bytes);
  memset(b + HARNESS_GUARD + bytes, HARNESS_GUARD_BYTE, HARNESS_GUARD);
  return (uint8_t *)m + HARNESS_GUARD;
}

void harness_guarded_free(uint8_t *buf) {
  if (buf == NULL) return;
  if (weft__mem_guarded.owns(&weft__mem_guarded, buf)) weft__mem_guarded.free(&weft__mem_guarded, buf - HARNESS_GUARD);
  else free(buf - HARNESS_GUARD);
}

int harness_guarded_check(harness_rank *r, const uint8_t *user_buf, size_t bytes, const char *desc) {
  const uint8_t *buf = harness_view(user_buf - HARNESS_GUARD, bytes + 2 * HARNESS_GUARD) + HARNESS_GUARD;
  for (int i = 0; i < HARNESS_GUARD; i++) {
    const uint8_t *before = buf - HARNESS_GUARD + i, *after = buf + bytes + i;
    if (*before != HARNESS_GUARD_BYTE)
      return harness_fail(r, "%s: guard byte %d before the buffer overwritten (0x%02x)", desc,
                          HARNESS_GUARD - i, *before);
    if (*after != HARNESS_GUARD_BYTE)
      return harness_fail(r, "%s: guard byte %d after the buffer overwritten (0x%02x)", desc, i,
                          *after);
  }
  return 1;
}

uint64_t harness_hash(const void *p, size_t bytes, uint64_t seed) {
  uint64_t h = seed ? seed : 0xcbf29ce484222325ull;
  const uint8_t *b = p;
  for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

int harness_all_gather_u64(harness_rank *r, uint64_t h, uint64_t *all, const char *desc) {
  weft_status_t st = weft_all_gather(&h, all, sizeof h, WEFT_UINT8, r->comm, NULL);
  if (st == WEFT_SUCCESS) return 1;
  return harness_fail(r, "%s: all_gather of result hashes returned %s: \"%s\"", desc,
                      harness_status_name(st), weft_get_last_error(r->comm));
}

int harness_same_on_all_ranks(harness_rank *r, uint64_t h, const char *desc) {
  uint64_t all[HARNESS_MAX_RANKS];
  if (!harness_all_gather_u64(r, h, all, desc)) return 0;
  for (int p = 1; p < r->nranks; p++)
    if (all[p] != all[0])
      return harness_fail(r, "%s: result not bitwise identical on every rank: hash of rank %d "
                          "%016llx, of rank 0 %016llx", desc, p, (unsigned long long)all[p],
                          (unsigned long long)all[0]);
  return 1;
}

/* ---- the rank process ---------------------------------------------------------------- */

static void child_isolate(int rank, int keep_fd, pid_t parent) {
  /* Die with the test program, whatever kills it. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(HARNESS_EXIT_CAP + 1);
  char name[32]; /* the kernel keeps 15 characters: "weft-rank-" and up to 5 digits */
  snprintf(name, sizeof name, "weft-rank-%d", rank % HARNESS_MAX_RANKS);
  prctl(PR_SET_NAME, name);
  /* cmocka's handlers would longjmp into the copy of the runner: restore the defaults. */
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS, SIGABRT, SIGPIPE};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* Stray output of a rank must not corrupt the parent's TAP stream. */
  dup2(2, 1);
  /* Sockets of earlier tests' bootstrap roots must not be kept open by this rank. */
  for (int fd = 3; fd < 1024; fd++)
    if (fd != keep_fd) close(fd);
}

static int child_read_id(int fd, weft_unique_id_t *id) {
  size_t got = 0;
  while (got < sizeof *id) {
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, 30000) <= 0) return -1;
    ssize_t n = read(fd, id->internal + got, sizeof *id - got);
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

static int child_init(harness_rank *r, const harness_opts *o) {
  double t0 = harness_now_ms();
  weft_status_t st = weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config);
  r->init_status = st;
  if (st == WEFT_SUCCESS || (o->nonblocking && st == WEFT_IN_PROGRESS)) return 0;
  harness_fail(r, "weft_comm_init_rank_config(nranks %d, rank %d) returned %s after %.0f ms: "
               "\"%s\"", r->nranks, r->rank, harness_status_name(st), harness_now_ms() - t0,
               weft_get_last_error(NULL));
  r->comm = NULL;
  return -1;
}

static void child_main(const harness_opts *o, int rank, int fd, pid_t parent,
                       harness_shared *shared, harness_body_fn body, void *arg) {
  child_isolate(rank, fd, parent);
  harness_rank r = {0};
  r.rank = rank;
  r.nranks = o->nranks;
  r.transport = o->transport;
  r.arg = arg;
  r.shared = shared;
  weft_config_t cfg = WEFT_CONFIG_INITIALIZER;
  cfg.timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : HARNESS_DEFAULT_TIMEOUT_MS;
  if (o->nonblocking) cfg.blocking = 0;
  r.config = cfg;
  if (o->transport) setenv("WEFT_TRANSPORT", o->transport, 1);
  if (o->chunk_bytes) {
    char v[32];
    snprintf(v, sizeof v, "%zu", o->chunk_bytes);
    setenv("WEFT_CHUNK_BYTES", v, 1);
  }
  if (child_read_id(fd, &r.id) != 0) {
    harness_fail(&r, "did not receive the unique id from the test program");
    _exit(1);
  }
  close(fd);
  if (o->no_init || child_init(&r, o) == 0) {
    body(&r);
    if (r.comm) {
      weft_status_t st = weft_comm_destroy(r.comm);
      if (st != WEFT_SUCCESS)
        harness_fail(&r, "weft_comm_destroy returned %s: \"%s\"", harness_status_name(st),
                     weft_get_last_error(NULL));
    }
  }
  _exit(r.failures > HARNESS_EXIT_CAP ? HARNESS_EXIT_CAP : r.failures);
}

/* ---- the parent ---------------------------------------------------------------------- */

typedef struct {
  pid_t pid;
  int fd;      /* our end of the socketpair carrying the id */
  int status;  /* waitpid status */
  int done;
} rank_proc;

static void kill_all(rank_proc *p, int n) {
  for (int i = 0; i < n; i++)
    if (p[i].pid > 0 && !p[i].done) kill(p[i].pid, SIGKILL);
  for (int i = 0; i < n; i++)
    if (p[i].pid > 0 && !p[i].done) waitpid(p[i].pid, &p[i].status, 0);
}

static int send_id(int fd, const weft_unique_id_t *id) {
  size_t off = 0;
  while (off < sizeof *id) {
    ssize_t n = send(fd, id->internal + off, sizeof *id - off, MSG_NOSIGNAL);
    if (n <= 0) return -1;
    off += (size_t)n;
  }
  return 0;
}

/* Reaps the ranks until all exited or the deadline; returns how many were still running
 * (then killed). */
static int reap(rank_proc *p, int n, int deadline_s) {
  double end = harness_now_ms() + deadline_s * 1000.0;
  int left = n;
  while (left > 0 && harness_now_ms() < end) {
    for (int i = 0; i < n; i++) {
      if (p[i].done) continue;
      if (waitpid(p[i].pid, &p[i].status, WNOHANG) == p[i].pid) {
        p[i].done = 1;
        left--;
      }
    }
    if (left > 0) harness_sleep_ms(2);
  }
  if (left == 0) return 0;
  for (int i = 0; i < n; i++)
    if (!p[i].done) {
      kill(p[i].pid, SIGKILL);
      waitpid(p[i].pid, &p[i].status, 0);
    }
  return left;
}

/* Appends to report why rank i failed; returns 1 when it did. */
static int judge(const harness_opts *o, const rank_proc *p, int i, int hung, char *report,
                 size_t len) {
  size_t used = strlen(report);
  if (hung) {
    snprintf(report + used, len - used, " rank %d hung (killed after %d s);", i,
             o->deadline_s > 0 ? o->deadline_s : HARNESS_DEFAULT_DEADLINE_S);
    return 1;
  }
  int st = p[i].status;
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
  if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && (o->may_be_killed & (1u << i))) return 0;
  if (WIFEXITED(st))
    snprintf(report + used, len - used, " rank %d exited with %d (failed checks%s, see stderr);",
             i, WEXITSTATUS(st), WEXITSTATUS(st) >= HARNESS_EXIT_CAP ? ", capped" : "");
  else
    snprintf(report + used, len - used, " rank %d killed by signal %d (%s);", i,
             WTERMSIG(st), strsignal(WTERMSIG(st)));
  return 1;
}

int harness_thread_count(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  int n = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  fclose(f);
  return n;
}

/* 0 when this process is single-threaded (waiting up to 5 s for exiting threads to go),
 * else -1 with the reason in report: forking then may leave a rank deadlocked. */
static int check_single_threaded(char *report, size_t len) {
  int n = harness_thread_count();
  for (int waited = 0; n > 1 && waited < 5000; waited += 10) {
    harness_sleep_ms(10);
    n = harness_thread_count();
  }
  if (n <= 1) return 0; /* -1: no /proc; nothing to check with */
  snprintf(report, len, " the test program has %d threads at fork (a weft call in the test "
           "itself started one; ranks forked now may deadlock on a lock it holds);", n);
  return -1;
}

/* ---- root hosts: the processes that own the bootstrap roots ---------------------------- */

typedef struct {
  pid_t pid;
  int fd; /* our end; closing it ends the root host */
} root_host;

/* The root host: makes the id, sends it (or the failure text) to the parent, then keeps the
 * root thread alive until the parent closes its end or dies. */
static void root_host_main(int fd, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  prctl(PR_SET_NAME, "weft-root-host");
  for (int i = 3; i < 1024; i++)
    if (i != fd) close(i);
  weft_unique_id_t id;
  char msg[1 + sizeof id.internal + 512];
  memset(msg, 0, sizeof msg);
  weft_status_t st = weft_get_unique_id(&id);
  msg[0] = (char)st;
  if (st == WEFT_SUCCESS) memcpy(msg + 1, id.internal, sizeof id.internal);
  else snprintf(msg + 1, sizeof msg - 1, "%s", weft_get_last_error(NULL));
  if (send(fd, msg, sizeof msg, MSG_NOSIGNAL) != (ssize_t)sizeof msg) _exit(1);
  char c;
  while (read(fd, &c, 1) < 0 && errno == EINTR) {
  }
  _exit(0);
}

/* Forks a root host and reads its id. 0, or -1 with the reason in report. */
static int root_host_start(root_host *h, weft_unique_id_t *id, char *report, size_t len) {
  h->pid = -1;
  h->fd = -1;
  if (check_single_threaded(report, len) != 0) return -1;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    snprintf(report, len, " socketpair for the root host: %s;", strerror(errno));
    return -1;
  }
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) root_host_main(sv[1], parent);
  close(sv[1]);
  if (pid < 0) {
    snprintf(report, len, " fork of the root host: %s;", strerror(errno));
    close(sv[0]);
    return -1;
  }
  h->pid = pid;
  h->fd = sv[0];
  char msg[1 + sizeof id->internal + 512];
  struct pollfd pfd = {sv[0], POLLIN, 0};
  ssize_t n = poll(&pfd, 1, 30000) == 1 ? recv(sv[0], msg, sizeof msg, 0) : -1;
  if (n != (ssize_t)sizeof msg) {
    snprintf(report, len, " the root host sent no unique id within 30 s;");
    return -1;
  }
  if (msg[0] != WEFT_SUCCESS) {
    msg[sizeof msg - 1] = '\0';
    snprintf(report, len, " weft_get_unique_id returned %s: \"%s\";",
             harness_status_name((weft_status_t)msg[0]), msg + 1);
    return -1;
  }
  memcpy(id->internal, msg + 1, sizeof id->internal);
  return 0;
}

static void root_host_stop(root_host *h) {
  if (h->fd >= 0) close(h->fd);
  if (h->pid > 0) {
    kill(h->pid, SIGKILL);
    waitpid(h->pid, NULL, 0);
  }
  h->pid = -1;
  h->fd = -1;
}

/* Root hosts of harness_unique_id, ended at exit. */
#define HARNESS_MAX_LOOSE_ROOTS 64
static root_host loose_roots[HARNESS_MAX_LOOSE_ROOTS];
static int n_loose_roots;

static void stop_loose_roots(void) {
  for (int i = 0; i < n_loose_roots; i++) root_host_stop(&loose_roots[i]);
  n_loose_roots = 0;
}

void harness_unique_id(weft_unique_id_t *id) {
  if (n_loose_roots == HARNESS_MAX_LOOSE_ROOTS) fail_msg("harness_unique_id: more than %d ids", n_loose_roots);
  if (n_loose_roots == 0) atexit(stop_loose_roots);
  char report[512] = "";
  root_host *h = &loose_roots[n_loose_roots++];
  if (root_host_start(h, id, report, sizeof report) != 0) {
    root_host_stop(h);
    n_loose_roots--;
    fail_msg("harness_unique_id:%s", report);
  }
}

static int fork_ranks(const harness_opts *o, rank_proc *p, harness_shared *shared,
                      harness_body_fn body, void *arg) {
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < o->nranks; i++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
      close(sv[0]);
      close(sv[1]);
      return -1;
    }
    if (pid == 0) child_main(o, i, sv[1], parent, shared, body, arg);
    close(sv[1]);
    p[i].pid = pid;
    p[i].fd = sv[0];
  }
  return 0;
}

void harness_run(const harness_opts *o, harness_body_fn body, void *arg) {
  if (o->nranks < 1 || o->nranks > HARNESS_MAX_RANKS) fail_msg("bad nranks %d", o->nranks);
  harness_shared *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) fail_msg("mmap of the shared page: %s", strerror(errno));
  rank_proc p[HARNESS_MAX_RANKS];
  memset(p, 0, sizeof p);
  for (int i = 0; i < HARNESS_MAX_RANKS; i++) p[i].fd = -1;
  char report[4096] = "";
  int bad = check_single_threaded(report, sizeof report) != 0;
  if (!bad && fork_ranks(o, p, shared, body, arg) != 0) {
    snprintf(report, sizeof report, " fork/socketpair failed: %s;", strerror(errno));
    bad = 1;
  }
  weft_unique_id_t id;
  root_host host = {-1, -1};
  if (!bad && o->id) id = *o->id;
  if (!bad && !o->id) bad = root_host_start(&host, &id, report, sizeof report) != 0;
  for (int i = 0; i < o->nranks && !bad; i++)
    if (p[i].fd >= 0 && send_id(p[i].fd, &id) != 0) {
      snprintf(report, sizeof report, " could not send the id to rank %d: %s;", i,
               strerror(errno));
      bad = 1;
    }
  for (int i = 0; i < o->nranks; i++)
    if (p[i].fd >= 0) close(p[i].fd);
  if (bad) {
    kill_all(p, o->nranks);
  } else {
    int left = reap(p, o->nranks, o->deadline_s > 0 ? o->deadline_s : HARNESS_DEFAULT_DEADLINE_S);
    for (int i = 0; i < o->nranks; i++)
      bad |= judge(o, p, i, left > 0 && !p[i].done, report, sizeof report);
  }
  root_host_stop(&host);
  munmap(shared, sizeof *shared);
  if (bad)
    fail_msg("%d ranks over %s:%s", o->nranks, o->transport ? o->transport : "default", report);
}

void harness_filter_from_env(void) {
  const char *f = getenv("WEFT_TEST_FILTER");
  if (f && *f) cmocka_set_test_filter(f);
}

void harness_run_simple(int nranks, const char *transport, harness_body_fn body, void *arg) {
  harness_opts o = {0};
  o.nranks = nranks;
  o.transport = transport;
  harness_run(&o, body, arg);
}

int harness_dtype_signed(weft_datatype_t dt) {
  return dt != WEFT_UINT8 && dt != WEFT_UINT32 && dt != WEFT_UINT64;
}

long harness_red_value(weft_redop_t op, weft_datatype_t dt, int rank, size_t j) {
  int sgn = harness_dtype_signed(dt);
  long v;
  switch (op) {
  case WEFT_SUM:
  case WEFT_AVG:
    v = (long)(((size_t)rank * 3 + j * 5 + 1) % 9);
    return sgn ? v - 4 : v;
  case WEFT_PROD:
    v = (j * 7 + (size_t)rank) % 8 < 3 ? 2 : 1;
    return sgn && (j + (size_t)rank * 3) % 5 == 0 ? -v : v;
  default:
    v = (long)(((size_t)rank * 7 + j * 3) % 11);
    return sgn ? v - 5 : v;
  }
}

static char verbs_emu_dir[96];

int harness_verbs_emu_setup(const char *tag) {
  const char *top = getenv("WEFT_TOP_BUILDDIR");
  char lib[600];
  snprintf(lib, sizeof lib, "%s/tests/verbs_emu/.libs/libweft_verbs_emu.so", top ? top : ".");
  snprintf(verbs_emu_dir, sizeof verbs_emu_dir, "/dev/shm/weft-%s-emu-XXXXXX", tag);
  if (access(lib, R_OK) != 0 || mkdtemp(verbs_emu_dir) == NULL) return verbs_emu_dir[0] = '\0', 0;
  setenv("WEFT_IB_LIBRARY", lib, 1);
  setenv("WEFT_VERBS_EMU_DIR", verbs_emu_dir, 1);
  setenv("WEFT_IB_TIMEOUT", "14", 1); /* 67 ms per transport retry */
  return 1;
}

void harness_verbs_emu_teardown(void) {
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", verbs_emu_dir);
  if (verbs_emu_dir[0] != '\0' && system(cmd) != 0) fprintf(stderr, "# could not remove %s\n", verbs_emu_dir);
  verbs_emu_dir[0] = '\0';
}

/* flight.c: the flight recorder's ring, its JSON, its files, and snapshots asked for by
 * other threads (flight.h). The JSON format is documented in the README and read by
 * tools/weft_flight.py:
 *   {"weft_flight_recorder": 1, "comm": "<id>", "rank": R, "nranks": N, "pid": P,
 *    "host": "...", "reason": "...", "error": "..." | null, "now_ns": T, "timeout_ms": M,
 *    "entries": [{"seq", "coll", "count", "dtype", "op", "root", "peer", "algo",
 *                 "start_ns", "end_ns", "state", "status"}, ... oldest first],
 *    "in_flight": null | {"seq", "coll", "waiting_for": [peers],
 *                         "peers": [{"peer", "sent", "received", "send_pending": [done, bytes] | null,
 *                                    "recv_pending": [done, bytes] | null}, ...]}} */
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lib/algo.h"
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/env.h"
#include "lib/flight.h"
#include "lib/log.h"
#include "lib/status.h"
#include "lib/task.h"

/* Whether the TSC ticks at one rate whatever the core's state, and so can stand for time
 * (CPUID 0x80000007 EDX bit 8, "invariant TSC", on Intel and AMD alike). */
static int tsc_invariant(void) {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  return __get_cpuid(0x80000007, &a, &b, &c, &d) && (d >> 8 & 1u);
#else
  return 0;
#endif
}

/* A TSC reading and CLOCK_MONOTONIC's, taken together (the TSC read between two clock reads,
 * the clock's value their midpoint). */
static void tsc_pair(uint64_t *tsc, uint64_t *ns) {
#if defined(__x86_64__)
  uint64_t before = weft__now_ns();
  *tsc = __builtin_ia32_rdtsc();
  *ns = before + (weft__now_ns() - before) / 2;
#else
  *tsc = 0;
  *ns = weft__now_ns();
#endif
}

/* A time of the recorder's clock in CLOCK_MONOTONIC ns (0 stays 0: not yet ended, or not
 * timed: flight.h). With the TSC, on the line through (tsc0, ns0) and (tsc1, ns1), a reading
 * of both taken as the record is written. */
static uint64_t ticks_ns(const weft__flight *f, uint64_t ticks, uint64_t tsc1, uint64_t ns1) {
  if (!f->tsc || ticks == 0) return ticks;
  if (tsc1 <= f->tsc0 || ticks <= f->tsc0) return f->ns0;
  /* ticks - tsc0 at (ns1 - ns0) ns per (tsc1 - tsc0) ticks; 128 bits: no overflow */
  unsigned __int128 d = (unsigned __int128)(ticks - f->tsc0) * (ns1 - f->ns0);
  return f->ns0 + (uint64_t)(d / (tsc1 - f->tsc0));
}

void weft__flight_init(struct weft_comm *comm) {
  weft__flight *f = &comm->flight;
  pthread_mutex_init(&f->req_lock, NULL);
  long want = weft__env_long("WEFT_FLIGHT_RECORDER_ENTRIES", WEFT__FLIGHT_DEFAULT_ENTRIES);
  if (want <= 0) return;
  uint32_t n = 1;
  while (n < (uint64_t)want && n < WEFT__FLIGHT_MAX_ENTRIES) n *= 2;
  f->ring = calloc(n, sizeof(*f->ring));
  if (f->ring == NULL) {
    WEFT_WARN("rank %d: flight recorder off: no memory for %u entries", comm->rank, n);
    return;
  }
  f->n = n;
  f->tsc = tsc_invariant();
  if (f->tsc) tsc_pair(&f->tsc0, &f->ns0);
  /* FNV-1a of the secret: names this communicator's files alike on every rank without
   * revealing the secret (which would let anyone join). */
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 16; i++) h = (h ^ comm->secret[i]) * 0x100000001b3ull;
  f->id = h;
}

void weft__flight_free(struct weft_comm *comm) {
  free(comm->flight.ring);
  comm->flight.ring = NULL;
  pthread_mutex_destroy(&comm->flight.req_lock);
}

/* ---- JSON ------------------------------------------------------------------------------ */

typedef struct {
  char *buf;
  size_t len, pos; /* pos counts past len: the size the whole text needs */
} jbuf;

static void jb_printf(jbuf *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jb_printf(jbuf *j, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *at = j->pos < j->len ? j->buf + j->pos : NULL;
  int n = vsnprintf(at, at != NULL ? j->len - j->pos : 0, fmt, ap);
  va_end(ap);
  if (n > 0) j->pos += (size_t)n;
}

static void jb_string(jbuf *j, const char *s) {
  if (s == NULL) {
    jb_printf(j, "null");
    return;
  }
  jb_printf(j, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') jb_printf(j, "\\%c", c);
    else if (c < 0x20) jb_printf(j, "\\u%04x", c);
    else jb_printf(j, "%c", c);
  }
  jb_printf(j, "\"");
}

static const char *state_name(int s) {
  switch (s) {
    case WEFT__FLIGHT_RUNNING: return "running";
    case WEFT__FLIGHT_DONE: return "done";
    case WEFT__FLIGHT_FAILED: return "failed";
    default: return "empty";
  }
}

static void entry_json(jbuf *j, const weft__flight *f, const weft__flight_entry *e, uint64_t tsc1,
                       uint64_t ns1) {
  int reduction = e->coll == WEFT__COLL_ALL_REDUCE || e->coll == WEFT__COLL_REDUCE ||
                  e->coll == WEFT__COLL_REDUCE_SCATTER;
  jb_printf(j, "{\"seq\": %llu, \"coll\": ", (unsigned long long)e->seq);
  jb_string(j, weft__coll_name((weft__coll_t)e->coll));
  jb_printf(j, ", \"count\": %llu, \"dtype\": ", (unsigned long long)e->count);
  jb_string(j, weft__dtype_name((weft_datatype_t)e->dtype));
  jb_printf(j, ", \"op\": ");
  jb_string(j, reduction ? weft__op_name((weft_redop_t)e->op) : NULL);
  jb_printf(j, ", \"root\": %d, \"peer\": %d, \"algo\": ", e->root, e->peer);
  jb_string(j, e->algo);
  jb_printf(j, ", \"start_ns\": %llu, \"end_ns\": %llu, \"state\": \"%s\", \"status\": ",
            (unsigned long long)ticks_ns(f, e->start, tsc1, ns1),
            (unsigned long long)ticks_ns(f, e->end, tsc1, ns1), state_name(e->state));
  jb_string(j, e->state == WEFT__FLIGHT_FAILED ? weft__status_name((weft_status_t)e->status) : NULL);
  jb_printf(j, "}");
}

/* Bytes of peer p's head request of one direction: "[done, bytes]" or null. */
static void pending_json(jbuf *j, const weft__req *r) {
  if (r == NULL) jb_printf(j, "null");
  else jb_printf(j, "[%zu, %zu]", r->done, r->bytes);
}

/* Bytes sent to peer p by a send that its receive feeds as pieces land (weft__req.fwd)
 * while it is not yet posted: the receive is some connection's head, and until the driver
 * posts the send (after the receive completes) its bytes are in no queue. Counted while it
 * is not p's send head, whose bytes in_flight_json counts already. */
static uint64_t fed_bytes(const struct weft_comm *comm, int p) {
  const weft__conn *to = &comm->conns[p];
  uint64_t fed = 0;
  for (int q = 0; q < comm->nranks; q++) {
    const weft__req *r = comm->conns[q].recv_head;
    if (r != NULL && r->fwd != NULL && r->fwd->conn == to && r->fwd != to->send_head) fed += r->fwd->done;
  }
  return fed;
}

static void in_flight_json(jbuf *j, struct weft_comm *comm) {
  const weft__flight_entry *e = comm->flight.cur;
  if (e == NULL) {
    jb_printf(j, "null");
    return;
  }
  jb_printf(j, "{\"seq\": %llu, \"coll\": ", (unsigned long long)e->seq);
  jb_string(j, weft__coll_name((weft__coll_t)e->coll));
  jb_printf(j, ", \"waiting_for\": [");
  int first = 1;
  for (int p = 0; p < comm->nranks; p++) {
    const weft__conn *c = &comm->conns[p];
    if (c->send_head == NULL && c->recv_head == NULL) continue;
    jb_printf(j, "%s%d", first ? "" : ", ", p);
    first = 0;
  }
  jb_printf(j, "], \"peers\": [");
  first = 1;
  for (int p = 0; p < comm->nranks; p++) {
    const weft__conn *c = &comm->conns[p];
    if (p == comm->rank) continue;
    /* Bytes of this operation's completed messages (lib/req.c counts them per operation),
     * plus those of the messages in progress, posted or fed by a receive. */
    int mine = c->op_mark == comm->last_seq;
    uint64_t sent = (mine ? c->op_bytes[WEFT__REQ_SEND] : 0) + (c->send_head ? c->send_head->done : 0) +
                    fed_bytes(comm, p);
    uint64_t recvd = (mine ? c->op_bytes[WEFT__REQ_RECV] : 0) + (c->recv_head ? c->recv_head->done : 0);
    jb_printf(j, "%s{\"peer\": %d, \"sent\": %llu, \"received\": %llu, \"send_pending\": ", first ? "" : ", ", p,
              (unsigned long long)sent, (unsigned long long)recvd);
    pending_json(j, c->send_head);
    jb_printf(j, ", \"recv_pending\": ");
    pending_json(j, c->recv_head);
    jb_printf(j, "}");
    first = 0;
  }
  jb_printf(j, "]}");
}

size_t weft__flight_json(struct weft_comm *comm, char *buf, size_t len, const char *reason,
                         const char *error) {
  jbuf j = {buf, len, 0};
  const weft__flight *f = &comm->flight;
  uint64_t tsc1 = 0, ns1 = 0; /* now, for the conversion of TSC times (ticks_ns) */
  if (f->tsc) tsc_pair(&tsc1, &ns1);
  jb_printf(&j, "{\"weft_flight_recorder\": 1, \"comm\": \"%016llx\", \"rank\": %d, \"nranks\": %d, "
            "\"pid\": %d, \"host\": ", (unsigned long long)f->id, comm->rank, comm->nranks, (int)getpid());
  jb_string(&j, comm->peers != NULL ? comm->peers[comm->rank].hostname : "");
  jb_printf(&j, ",\n \"reason\": ");
  jb_string(&j, reason);
  jb_printf(&j, ", \"error\": ");
  jb_string(&j, error);
  jb_printf(&j, ",\n \"now_ns\": %llu, \"timeout_ms\": %d, \"entries_kept\": %u, \"last_collective\": %llu,\n"
            " \"entries\": [", (unsigned long long)(f->tsc ? ns1 : weft__coarse_ns()), comm->timeout_ms, f->n,
            (unsigned long long)comm->coll_seq);
  uint64_t from = f->written > f->n ? f->written - f->n : 0;
  for (uint64_t i = from; i < f->written; i++) {
    jb_printf(&j, "%s\n  ", i == from ? "" : ",");
    entry_json(&j, f, &f->ring[i & (f->n - 1)], tsc1, ns1);
  }
  jb_printf(&j, "],\n \"in_flight\": ");
  if (comm->conns != NULL) in_flight_json(&j, comm);
  else jb_printf(&j, "null");
  jb_printf(&j, "}\n");
  if (len > 0 && j.pos >= len) buf[len - 1] = '\0';
  return j.pos + 1;
}

/* ---- files ----------------------------------------------------------------------------- */

void weft__flight_dump(struct weft_comm *comm, const char *reason, const char *error) {
  const char *dir = weft__env_str("WEFT_FLIGHT_RECORDER_DIR", NULL);
  if (dir == NULL || comm->flight.ring == NULL) return;
  /* After a failure its record (written then, with the requests it waited on) is the one
   * that tells what went wrong; no later snapshot (SIGUSR1, abort) replaces it. */
  if (comm->broken && error == NULL) return;
  size_t need = weft__flight_json(comm, NULL, 0, reason, error);
  char *text = malloc(need);
  char path[4096], tmp[4200];
  snprintf(path, sizeof(path), "%s/weft-flight.%016llx.rank%d.json", dir,
           (unsigned long long)comm->flight.id, comm->rank);
  snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
  if (text == NULL) {
    WEFT_WARN("rank %d: flight recorder: no memory for a %zu-byte dump", comm->rank, need);
    return;
  }
  weft__flight_json(comm, text, need, reason, error);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  size_t at = 0, n = strlen(text);
  while (fd >= 0 && at < n) {
    ssize_t k = write(fd, text + at, n - at);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    at += (size_t)k;
  }
  int ok = fd >= 0 && at == n;
  int err = errno;
  if (fd >= 0 && close(fd) != 0) ok = 0;
  if (ok && rename(tmp, path) != 0) ok = 0, err = errno;
  if (!ok) {
    WEFT_WARN("rank %d: flight recorder: cannot write %s: %s", comm->rank, path, strerror(err));
    unlink(tmp);
  } else {
    WEFT_INFO("rank %d: flight recorder written to %s (%s)", comm->rank, path, reason);
  }
  free(text);
}

void weft__flight_failed(struct weft_comm *comm, weft_status_t st, const char *error) {
  weft__flight *f = &comm->flight;
  weft__flight_entry *e = f->cur;
  if (e == NULL) return;
  e->end = weft__flight_ticks(f);
  e->state = WEFT__FLIGHT_FAILED;
  e->status = (int32_t)st;
  weft__flight_dump(comm, st == WEFT_ERR_TIMEOUT ? "timeout" : st == WEFT_ERR_ABORTED ? "abort" : "error", error);
  f->cur = NULL;
}

/* ---- snapshots for other threads --------------------------------------------------------- */

/* Takes the pending request, under comm->lock. */
static void serve_now(struct weft_comm *comm) {
  weft__flight *f = &comm->flight;
  if (!f->req_to_file)
    f->req_needed = weft__flight_json(comm, f->req_buf, f->req_len, f->req_reason, NULL);
  else
    weft__flight_dump(comm, f->req_reason, NULL);
  atomic_store_explicit(&f->served, 1, memory_order_release);
}

void weft__flight_serve(struct weft_comm *comm) {
  if (atomic_exchange(&comm->flight.want, 0) == 1) serve_now(comm);
}

weft_status_t weft__flight_request(struct weft_comm *comm, char *buf, size_t len, size_t *needed,
                                   int to_file, const char *reason, int timeout_ms) {
  weft__flight *f = &comm->flight;
  pthread_mutex_lock(&f->req_lock);
  f->req_buf = to_file ? NULL : buf;
  f->req_len = to_file ? 0 : len;
  f->req_needed = 0;
  f->req_reason = reason;
  f->req_to_file = to_file;
  atomic_store(&f->served, 0);
  atomic_store(&f->want, 1);
  uint64_t deadline = weft__coarse_ns() + (uint64_t)timeout_ms * 1000000ull;
  weft_status_t st = WEFT_SUCCESS;
  for (;;) {
    if (atomic_load_explicit(&f->served, memory_order_acquire)) break;
    if (weft__op_lock_try(&comm->lock)) { /* no operation runs: serve it here */
      weft__flight_serve(comm);
      weft__op_lock_release(&comm->lock);
      continue;
    }
    if (weft__coarse_ns() > deadline) {
      int one = 1;
      if (atomic_compare_exchange_strong(&f->want, &one, 0)) { /* nobody took it */
        st = weft__error(comm, WEFT_ERR_TIMEOUT, "rank %d: flight recorder: the thread running an "
                         "operation did not answer within %d ms", comm->rank, timeout_ms);
        break;
      }
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  if (needed != NULL) *needed = f->req_needed;
  pthread_mutex_unlock(&f->req_lock);
  return st;
}

/* ---- the public call ---------------------------------------------------------------------- */

weft_status_t weft_comm_flight_record(weft_comm_t comm, char *buf, size_t len, size_t *needed) {
  if (needed != NULL) *needed = 0;
  if (comm == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_flight_record: comm is NULL");
  if (buf == NULL && len > 0)
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "rank %d: weft_comm_flight_record: buf is NULL but "
                       "len is %zu", comm->rank, len);
  WEFT_TRY(weft__comm_wait_ready(comm));
  if (comm->flight.ring == NULL)
    return weft__error(comm, WEFT_ERR_UNSUPPORTED, "rank %d: weft_comm_flight_record: the flight recorder is "
                       "off (WEFT_FLIGHT_RECORDER_ENTRIES=0, or no memory at init)", comm->rank);
  size_t need = 0;
  WEFT_TRY(weft__flight_request(comm, buf, len, &need, 0, "api", 2000));
  if (needed != NULL) *needed = need;
  if (len < need)
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "rank %d: weft_comm_flight_record: the text needs %zu "
                       "bytes, the buffer has %zu", comm->rank, need, len);
  return WEFT_SUCCESS;
}

/* flight.h: the flight recorder. Each communicator keeps its last N operations (sequence
 * number, collective, count, datatype, op, root or peer, algorithm, start and end time,
 * state) in a ring, and for the one in flight how many bytes moved per peer and which
 * peers it waits for. It is written as JSON (one file per rank, under
 * WEFT_FLIGHT_RECORDER_DIR) when an operation fails (timeout, abort, any error) and on
 * SIGUSR1, and read through weft_comm_flight_record (weft.h); tools/weft_flight.py reads
 * the files of all ranks and names who is behind and who waits for whom.
 *
 * Cost: recording is a few stores into the ring and two reads of the recorder's clock, no
 * allocation and no lock beyond the operation's. The clock is the TSC where it is invariant
 * (x86-64 with CPUID 0x80000007 EDX bit 8: one instruction, no memory read), converted to
 * CLOCK_MONOTONIC ns only when a record is written (flight.c); elsewhere
 * CLOCK_MONOTONIC_COARSE (a vDSO read; the kernel tick's resolution, a few ms), read at
 * both ends too: a call that never waited may still be long (a large copy on one rank, a
 * ring that always had a piece to move), and its end once taken as its start recorded a
 * 50 ms call as 0 ms. Why the TSC: the coarse clock's read at each call's start
 * cost an 8-byte broadcast 7-11% on the Zen 3 VM (2 ranks, 31 alternating launches, the
 * recorder off against on: 21-24 of 31 faster), where rdtsc in its place measured the same
 * as no clock read at all; the TSC recorder against the coarse one: 6-12% faster, 22-26 of
 * 31 (all-reduce 8-256 B within the spread).
 * Calls of under WEFT__FLIGHT_TIMED_BYTES that never wait take no clock reading at all: on
 * the Zen 4 VM rdtsc costs 9.5 ns, and the two reads cost a 2-rank 8-byte broadcast 13%
 * (8 launches rotating builds: 0.104-0.109 us with both, 0.088-0.092 with neither, either
 * one alone 0.098-0.111). Such a call's start is read once it has waited past the spin
 * (lib/task.c's drive, SPIN_ITERS idle looks, a few us: weft__flight_waiting), and its end
 * then when it ends; one that completes sooner runs for a few us at most and is recorded
 * with start and end 0 ("not timed"). A call that hangs is timed from its first few us of
 * waiting. Larger calls, whose bytes may take long without a wait (a 256 MiB copy on one
 * rank), are timed at both ends as before. With this, 8-64 B broadcasts ran 0.099-0.105
 * against 0.103-0.115 us, 8 B-1 KiB all-reduces 0.16-0.22 against 0.17-0.24 (2 ranks,
 * 8-12 alternating launches, the host's fast launches).
 * Everything here runs under comm->lock: the ring is only written by the thread running
 * an operation, and another thread that wants a snapshot while one runs asks that thread
 * (weft__flight_poll, checked where the operation waits and when it ends). */
#ifndef WEFT_FLIGHT_H
#define WEFT_FLIGHT_H
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include "weft.h"

struct weft_comm;

enum { WEFT__FLIGHT_EMPTY = 0, WEFT__FLIGHT_RUNNING, WEFT__FLIGHT_DONE, WEFT__FLIGHT_FAILED };
enum { WEFT__FLIGHT_DEFAULT_ENTRIES = 256, WEFT__FLIGHT_MAX_ENTRIES = 1 << 16 };

typedef struct {
  uint64_t seq;            /* the task's number: per comm for collectives, per rank for p2p */
  uint64_t count;          /* elements (p2p groups: operations) */
  uint64_t start, end;     /* in the recorder's clock (weft__flight_ticks); end 0 while running,
                              both 0 for a short call that never waited (not timed) */
  const char *algo;        /* static: the algorithm row's name */
  int32_t root, peer;
  uint8_t coll, dtype, op, state;
  int32_t status;          /* weft_status_t of a failed one */
} weft__flight_entry;

typedef struct weft__flight {
  weft__flight_entry *ring; /* [n]; NULL when off (WEFT_FLIGHT_RECORDER_ENTRIES=0) */
  uint32_t n;               /* a power of two */
  uint64_t written;         /* entries ever written: the newest is ring[(written - 1) % n] */
  weft__flight_entry *cur;  /* the operation running, or NULL */
  int tsc;                  /* the recorder's clock is the invariant TSC (else the coarse clock) */
  uint64_t tsc0, ns0;       /* a TSC reading and CLOCK_MONOTONIC's at the same moment (init) */
  uint64_t id;              /* the communicator's identity in dumps (a hash, not its secret) */
  /* A snapshot asked for by another thread (weft__flight_request): */
  pthread_mutex_t req_lock;
  atomic_int want;          /* 1: the thread running an operation should serve it */
  atomic_int served;
  char *req_buf;            /* NULL: to the file */
  size_t req_len, req_needed;
  const char *req_reason;
  int req_to_file;
  struct weft_comm *next;   /* in flight_signal.c's list of communicators */
  int listed;
} weft__flight;

/* Sets up comm's recorder (WEFT_FLIGHT_RECORDER_ENTRIES, default 256; 0 turns it off).
 * Out of memory leaves it off, with a warning. */
void weft__flight_init(struct weft_comm *comm);
void weft__flight_free(struct weft_comm *comm);

static inline uint64_t weft__coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The recorder's clock: TSC ticks when f->tsc, else coarse CLOCK_MONOTONIC ns. */
static inline uint64_t weft__flight_ticks(const weft__flight *f) {
#if defined(__x86_64__)
  if (f->tsc) return __builtin_ia32_rdtsc();
#endif
  return weft__coarse_ns();
}

/* Calls of at least this many bytes per rank (and every all-to-all-v and send/recv group,
 * whose sizes the entry does not hold) are timed from their start; smaller ones only once
 * they wait (above). */
#define WEFT__FLIGHT_TIMED_BYTES (64u * 1024u)

/* Records an operation as running: its number, count (elements; operations for a p2p
 * group), algorithm row name (static), root, peer, and its collective, datatype and op as
 * lib/task.h numbers them; timed: read the clock now (else once it waits past the spin, if it does).
 * Caller holds comm->lock. Inline, fields passed one by one: it runs on every call, and a
 * call plus a read of the task cost a small all-reduce ~3% more. */
static inline void weft__flight_begin(weft__flight *f, uint64_t seq, uint64_t count, const char *algo,
                                      int root, int peer, int coll, int dtype, int op, int timed) {
  if (f->ring == NULL) return;
  weft__flight_entry *e = &f->ring[f->written++ & (f->n - 1)];
  e->seq = seq;
  e->count = count;
  e->start = timed ? weft__flight_ticks(f) : 0;
  e->end = 0;
  e->algo = algo;
  e->root = root;
  e->peer = peer;
  e->coll = (uint8_t)coll;
  e->dtype = (uint8_t)dtype;
  e->op = (uint8_t)op;
  e->state = WEFT__FLIGHT_RUNNING;
  e->status = 0;
  f->cur = e;
}
/* The running operation has waited past the spin (drive): its start, if not taken. */
static inline void weft__flight_waiting(weft__flight *f) {
  weft__flight_entry *e = f->cur;
  if (e != NULL && e->start == 0) e->start = weft__flight_ticks(f);
}
/* Marks the running entry done or failed (st), ended now (if timed). */
static inline void weft__flight_end(weft__flight *f, weft_status_t st) {
  weft__flight_entry *e = f->cur;
  if (e == NULL) return;
  if (e->start != 0) e->end = weft__flight_ticks(f);
  e->state = st == WEFT_SUCCESS ? WEFT__FLIGHT_DONE : WEFT__FLIGHT_FAILED;
  e->status = (int32_t)st;
  f->cur = NULL;
}

/* The running operation failed with st (error: its message): marks it, and writes the
 * record to the file (weft__flight_dump) while its requests are still queued. Nothing
 * when no operation was recorded as running. Caller holds comm->lock. */
void weft__flight_failed(struct weft_comm *comm, weft_status_t st, const char *error);

/* Serves a snapshot another thread asked for. Caller holds comm->lock. */
void weft__flight_serve(struct weft_comm *comm);
static inline void weft__flight_poll(struct weft_comm *comm, weft__flight *f) {
  if (atomic_load_explicit(&f->want, memory_order_relaxed)) weft__flight_serve(comm);
}

/* The JSON of comm's recorder into buf (at most len bytes, NUL-terminated when len > 0);
 * returns the bytes the whole text needs, NUL included. reason: why ("SIGUSR1", "error",
 * "api"); error: the message of a failure or NULL. Caller holds comm->lock. */
size_t weft__flight_json(struct weft_comm *comm, char *buf, size_t len, const char *reason,
                         const char *error);

/* Writes the JSON to WEFT_FLIGHT_RECORDER_DIR/weft-flight.<comm id>.rank<R>.json (through a
 * temporary file and a rename, so a reader never sees half a file) when that variable is
 * set; warns on failure. A communicator broken by a failure keeps that failure's record:
 * snapshots without an error are then not written. Caller holds comm->lock. */
void weft__flight_dump(struct weft_comm *comm, const char *reason, const char *error);

/* A snapshot from any thread: into buf (len bytes; *needed the bytes the text needs), or
 * to the file when buf is NULL and to_file. Takes comm->lock when free, else asks the
 * thread running an operation, which serves it within milliseconds while it waits or
 * when it ends; gives up after timeout_ms. Errors: WEFT_ERR_TIMEOUT (not served). */
weft_status_t weft__flight_request(struct weft_comm *comm, char *buf, size_t len, size_t *needed,
                                   int to_file, const char *reason, int timeout_ms);

/* flight_signal.c: with WEFT_FLIGHT_RECORDER_DIR set, lists comm for SIGUSR1 dumps (the
 * first call installs the handler and starts the thread that writes the files). */
void weft__flight_list(struct weft_comm *comm);
void weft__flight_unlist(struct weft_comm *comm);
#endif

/* task.c: running one operation to completion on the calling thread.
 *
 * Waiting: a rank that has nothing to move spins briefly (the answer is often microseconds
 * away), then yields the CPU (tests run more ranks than cores; with more ranks than cores on
 * the host it yields at once, unless it waits only for small messages from peers that hold
 * CPUs of their own: weft__task_spin_for_peers in lib/task.h), then sleeps, through
 * whatever the transports it waits on offer (transports/transport.h): poll() on their file
 * descriptors (sockets), or their sleep hook (WEFT__TRANSPORT_CAP_WAIT: shm's doorbell
 * futex, which peers ring when they publish something; a wake costs ~30 us here, so only
 * after the yield phase); waiting on both, it polls the descriptors and sleeps for short
 * naps; with neither, it naps. Every wait is bounded: when nothing has moved for the
 * communicator's timeout the operation fails naming the peer it waits for. While idle it
 * also checks, every few milliseconds, whether the bootstrap root reported a failed rank
 * and whether peers it waits for are still alive (WEFT__TRANSPORT_CAP_LIVENESS). */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "lib/bootstrap.h"
#include "lib/check.h"
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/env.h"
#include "lib/ft.h"
#include "lib/status.h"
#include "lib/algo.h"
#include "lib/task.h"
#include "mem/space.h"
#include "transports/transport.h"

#define SPIN_ITERS 200
#define SOCKET_SPIN_ITERS 20
#define CLOCK_EVERY 8              /* idle looks between two reads of the clock */
#define YIELD_NS 200000ull         /* yield for 0.2 ms after the last progress, then sleep */
#define OVERSUB_YIELD_NS 1000000ull /* the same with more ranks than cores: 1 ms */
#define OVERSUB_SPIN_LOOKS 200     /* with more ranks than cores, idle looks spent spinning on
                                      small messages from peers that run (lib/task.h) */
#define NAP_NS 50000               /* one nap when descriptors and a sleep hook are both
                                      waited on, or neither: 50 us */
#define HEALTH_EVERY_NS 20000000ull /* check peers' health every 20 ms while idle */

static const char *const coll_names[WEFT__NUM_COLLS] = {
    [WEFT__COLL_ALL_REDUCE] = "all_reduce",   [WEFT__COLL_BROADCAST] = "broadcast",
    [WEFT__COLL_REDUCE] = "reduce",           [WEFT__COLL_ALL_GATHER] = "all_gather",
    [WEFT__COLL_REDUCE_SCATTER] = "reduce_scatter", [WEFT__COLL_ALL_TO_ALL] = "all_to_all",
    [WEFT__COLL_ALL_TO_ALLV] = "all_to_allv", [WEFT__COLL_GATHER] = "gather",
    [WEFT__COLL_SCATTER] = "scatter",         [WEFT__COLL_BARRIER] = "barrier",
    [WEFT__COLL_SEND] = "send",               [WEFT__COLL_RECV] = "recv",
    [WEFT__COLL_P2P_GROUP] = "send/recv group",
};

const char *weft__coll_name(weft__coll_t coll) {
  return (unsigned)coll < WEFT__NUM_COLLS ? coll_names[coll] : "unknown operation";
}

void weft__task_init(weft__task *t, struct weft_comm *comm, weft__coll_t coll) {
  /* Field by field: zeroing the inline state too would cost more than the malloc it saves. */
  t->comm = comm;
  t->coll = coll;
  t->seq = 0;
  t->sendbuf = NULL;
  t->recvbuf = NULL;
  t->count = 0;
  t->dtype = WEFT_FLOAT32;
  t->op = WEFT_SUM;
  t->mem = &weft__mem_host;
  t->root = -1;
  t->peer = -1;
  t->p2p = NULL;
  t->np2p = 0;
  t->vcounts = NULL;
  t->algo = NULL;
  t->state = NULL;
  t->next = NULL;
  t->device_call = NULL;
}

weft_status_t weft__task_new(struct weft_comm *comm, weft__coll_t coll, weft__task **out) {
  weft__task *t = malloc(sizeof(*t));
  if (t == NULL) return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: %s: out of memory", comm->rank, weft__coll_name(coll));
  weft__task_init(t, comm, coll);
  *out = t;
  return WEFT_SUCCESS;
}

void weft__task_release(weft__task *t) {
  /* Tested first: a blocking call has none of them, and free(NULL) is still a call. */
  if (t->state != NULL && t->state != (void *)t->state_inline) free(t->state);
  if (t->p2p != NULL && t->p2p != t->p2p_inline) free(t->p2p);
  if (t->vcounts != NULL) free(t->vcounts);
  if (t->device_call != NULL) free(t->device_call);
  t->state = NULL;
  t->p2p = NULL;
  t->vcounts = NULL;
  t->device_call = NULL;
}

void weft__task_free(weft__task *t) {
  if (t == NULL) return;
  weft__task_release(t);
  free(t);
}

const char *weft__task_describe(const weft__task *t, char *buf, size_t len) {
  if (t->coll == WEFT__COLL_BARRIER) {
    snprintf(buf, len, "barrier #%llu", (unsigned long long)t->seq);
    return buf;
  }
  int n = snprintf(buf, len, "%s #%llu (count %zu %s", weft__coll_name(t->coll), (unsigned long long)t->seq,
                   t->count, weft__dtype_name(t->dtype));
  if (t->coll == WEFT__COLL_ALL_REDUCE || t->coll == WEFT__COLL_REDUCE || t->coll == WEFT__COLL_REDUCE_SCATTER)
    n += snprintf(buf + n, len - (size_t)n, " %s", weft__op_name(t->op));
  if (t->root >= 0) n += snprintf(buf + n, len - (size_t)n, " root %d", t->root);
  if (t->peer >= 0) n += snprintf(buf + n, len - (size_t)n, " peer %d", t->peer);
  if (t->coll == WEFT__COLL_P2P_GROUP) n = snprintf(buf, len, "%s #%llu (%d ops", weft__coll_name(t->coll),
                                                    (unsigned long long)t->seq, t->np2p);
  snprintf(buf + n, len - (size_t)n, ")");
  return buf;
}

/* The first peer with a request that has not completed, for timeout messages. */
static const weft__req *first_pending(struct weft_comm *comm) {
  for (int p = 0; p < comm->nranks; p++) {
    if (comm->conns[p].recv_head != NULL) return comm->conns[p].recv_head;
    if (comm->conns[p].send_head != NULL) return comm->conns[p].send_head;
  }
  return NULL;
}

/* A failed peer that this operation waits for, or -2; *why explains. The root going away is
 * no verdict: under mpirun it lives in rank 0's process, which may exit normally while the
 * other ranks finish their last operation among themselves. Then only a peer we wait for
 * that is really gone (process gone, socket closed) or the deadline ends the wait. */
static int failed_peer(struct weft_comm *comm, const char **why) {
  int failed;
  if (weft__bootstrap_check_failure(comm, &failed, why) != WEFT_SUCCESS && failed >= 0) return failed;
  for (int p = 0; p < comm->nranks; p++) {
    weft__conn *c = &comm->conns[p];
    if (c->send_head == NULL && c->recv_head == NULL) continue;
    if ((c->caps & WEFT__TRANSPORT_CAP_LIVENESS) && c->tr->peer_failed(comm, p, why)) return p;
  }
  return -2;
}

/* Fills fds with the descriptors the pending requests wait on. Requests on transports
 * without descriptors set *others, and *sleeper to their transport when it is one with a
 * sleep hook (WEFT__TRANSPORT_CAP_WAIT) and the only such transport pending. */
static int collect_waits(struct weft_comm *comm, struct pollfd *fds, int max, int *others,
                         const weft__transport **sleeper) {
  int n = 0, several = 0;
  *others = 0;
  *sleeper = NULL;
  for (int p = 0; p < comm->nranks; p++) {
    weft__conn *c = &comm->conns[p];
    if (c->send_head == NULL && c->recv_head == NULL) continue;
    if (c->tr->poll_fds != NULL && n < max) {
      n += c->tr->poll_fds(c, fds + n, max - n);
      continue;
    }
    *others = 1;
    if (!(c->caps & WEFT__TRANSPORT_CAP_WAIT)) several = 1;
    else if (*sleeper != NULL && *sleeper != c->tr) several = 1;
    else *sleeper = c->tr;
  }
  if (several) *sleeper = NULL;
  return n;
}

/* Sleeps through the transport's hook for at most ns, after announcing it and looking for
 * work once more (a peer signals only an announced sleeper); *moved when that look found
 * some. Without a sleeper, or when it has nothing to sleep on, a plain nap. */
static weft_status_t sleep_on(struct weft_comm *comm, const weft__transport *sleeper, uint64_t ns, int *moved) {
  uint32_t token;
  if (sleeper == NULL || !sleeper->sleep_begin(comm, &token)) {
    struct timespec ts = {0, (long)(ns < NAP_NS ? ns : NAP_NS)};
    nanosleep(&ts, NULL);
    return WEFT_SUCCESS;
  }
  weft_status_t st = weft__comm_progress(comm, moved);
  if (st == WEFT_SUCCESS && !*moved) sleeper->sleep(comm, token, ns);
  sleeper->sleep_end(comm);
  return st;
}

/* 4 ranks on 2 cores (bound), 8 B-1 KiB, alternating launches against yielding at once:
 * all-reduce 1.17-1.62x, reduce-scatter 1.09-1.43x, all-gather 1.11-1.33x and all-to-all
 * 1.10-1.40x faster; context switches per 8-byte all-reduce 8.5-9.0 -> 5.9-7.3 (both cores
 * together; perf/bench/RESULTS.md has the runs).
 * Spinning on every wait, sends and large messages too, ran reduce at 1-4 KiB and
 * all-reduce at 8-256 KiB 0.5-0.9x as fast; spinning in broadcasts 0.87-1.07x at 8-128 B
 * over two runs of 6 and 10 pairs, mostly slower, so they keep yielding. */
int weft__task_spin_for_peers(const struct weft_comm *comm, weft__coll_t coll) {
  if (coll == WEFT__COLL_BROADCAST) return 0;
  int waits = 0;
  for (int p = 0; p < comm->nranks; p++) {
    const weft__conn *c = &comm->conns[p];
    if (c->send_head != NULL) return 0;
    if (c->recv_head == NULL) continue;
    if (!c->other_cpus || c->recv_head->bytes > WEFT__OVERSUB_SPIN_BYTES || !c->tr->peer_on_cpu(c)) return 0;
    waits = 1;
  }
  return waits;
}

/* sched_yield, announced to the transports that tell peers (their yielding hooks). */
static void yield_cpu(struct weft_comm *comm) {
  for (int i = 0; i < comm->nyielding; i++) comm->yielding[i](comm, 1);
  sched_yield();
  for (int i = 0; i < comm->nyielding; i++) comm->yielding[i](comm, 0);
}

/* Gives the CPU away according to how long nothing has moved. Waiting only on descriptors
 * (sockets): a short spin, then poll() without sleeping, then poll() that sleeps until the
 * kernel wakes us when data arrives (spinning on recv() over loopback measured 3-30x slower
 * on these VMs; poll's look costs one system call). Waiting on
 * memory (shm): spin, then yield (more ranks than cores), then sleep through the
 * transport's hook. Sets *moved when a last look before sleeping moved something. */
static weft_status_t back_off(weft__task *t, unsigned idle, uint64_t idle_ns, int *moved) {
  struct weft_comm *comm = t->comm;
  if (comm->oversubscribed && idle_ns < OVERSUB_YIELD_NS) {
    if (idle < OVERSUB_SPIN_LOOKS && weft__task_spin_for_peers(comm, t->coll)) __builtin_ia32_pause();
    else yield_cpu(comm); /* spinning on every wait measured slower */
    return WEFT_SUCCESS;
  }
  if (idle < SOCKET_SPIN_ITERS) {
    __builtin_ia32_pause();
    return WEFT_SUCCESS;
  }
  struct pollfd fds[64];
  int others;
  const weft__transport *sleeper;
  int n = collect_waits(comm, fds, 64, &others, &sleeper);
  if (n > 0 && !others) {
    /* Not asleep at once: a blocking poll lets the vCPU halt, and on the Intel VM of
     * 2026-12-03 its wake-up cost 20-35 us in some launches and sizes, not others (2 ranks
     * over sockets, 8 B-32 KiB all-reduce 3.3-38 us a call, bimodal, old and new builds
     * alike). Non-blocking polls up to SPIN_ITERS looks, then blocking ones: 3.1-5.7 us at
     * 8 B-4 KiB in 6 of 6 launches; 16 and 128 MiB 1.02-1.09x faster (3 alternating launches).
     * With more ranks than cores a wait gets here only after yielding for 1 ms (above). */
    poll(fds, (nfds_t)n, idle < SPIN_ITERS ? 0 : 1);
    return WEFT_SUCCESS;
  }
  if (idle < SPIN_ITERS) {
    __builtin_ia32_pause();
    return WEFT_SUCCESS;
  }
  if (idle_ns < YIELD_NS) {
    yield_cpu(comm);
    return WEFT_SUCCESS;
  }
  if (n > 0) poll(fds, (nfds_t)n, 0);
  /* The deadline bounds the sleep; the transport bounds it further (a missed signal). */
  uint64_t left = (uint64_t)comm->timeout_ms * 1000000ull - idle_ns + 1000000ull; /* > 0: drive checked */
  uint64_t ns = n > 0 && NAP_NS < left ? NAP_NS : left;
  return sleep_on(comm, sleeper, ns, moved);
}

static weft_status_t timed_out(weft__task *t) {
  struct weft_comm *comm = t->comm;
  const weft__req *r = first_pending(comm);
  if (r == NULL)
    return weft__error(comm, WEFT_ERR_TIMEOUT, "rank %d: nothing moved for %d ms", comm->rank, comm->timeout_ms);
  return weft__error(comm, WEFT_ERR_TIMEOUT,
                     "rank %d: %s peer %d: nothing moved for %d ms (%zu of %zu bytes done); is peer %d stuck, dead or in another operation?",
                     comm->rank, r->kind == WEFT__REQ_SEND ? "send to" : "recv from", r->conn->peer,
                     comm->timeout_ms, r->done, r->bytes, r->conn->peer);
}

/* The whole operation ran past the timeout although bytes still trickle in (a peer stopped
 * and continued again and again, a link crawling): each move reset the idle deadline, so
 * only this bound ends it. */
static weft_status_t too_long(weft__task *t) {
  struct weft_comm *comm = t->comm;
  const weft__req *r = first_pending(comm);
  if (r == NULL)
    return weft__error(comm, WEFT_ERR_TIMEOUT, "rank %d: the operation did not finish within %d ms", comm->rank,
                       comm->timeout_ms);
  return weft__error(comm, WEFT_ERR_TIMEOUT,
                     "rank %d: the operation did not finish within %d ms although bytes still move (%s peer %d: "
                     "%zu of %zu bytes done); is peer %d's link or process crawling?", comm->rank,
                     comm->timeout_ms, r->kind == WEFT__REQ_SEND ? "send to" : "recv from", r->conn->peer, r->done,
                     r->bytes, r->conn->peer);
}

/* The health check of drive(): a failed peer we wait for ends the wait (after a last drain,
 * since it may have sent everything we need before it went). */
static weft_status_t check_health(weft__task *t) {
  struct weft_comm *comm = t->comm;
  const char *why;
  int failed = failed_peer(comm, &why), moved = 0;
  if (failed == -2) return WEFT_IN_PROGRESS;
  WEFT_TRY(weft__comm_progress(comm, &moved));
  weft_status_t st = t->algo->progress(t);
  if (st != WEFT_IN_PROGRESS) return st;
  if (failed == -1) return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: %s", comm->rank, why);
  return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: peer %d failed: %s", comm->rank, failed, why);
}

/* Progresses t until it completes, fails, or times out: nothing moved for the timeout, or
 * the operation as a whole ran longer than the timeout (counted from its first idle look,
 * at most CLOCK_EVERY looks after its start). The clock costs ~75 ns on the VM (a third of
 * a small all-reduce), so a wait reads it only every CLOCK_EVERY idle looks; a wait that
 * ends sooner never reads it. */
static inline weft_status_t drive(weft__task *t) {
  struct weft_comm *comm = t->comm;
  uint64_t last_move = 0, last_health = 0, now = 0, started = 0;
  unsigned idle = 0;
  for (;;) {
    if (atomic_load_explicit(&comm->aborted, memory_order_relaxed))
      return weft__error(comm, WEFT_ERR_ABORTED, "rank %d: the communicator was aborted", comm->rank);
    if (atomic_load_explicit(&comm->revoked, memory_order_relaxed)) return weft__comm_revoked_error(comm, NULL);
    int moved = 0;
    WEFT_TRY(weft__comm_progress(comm, &moved));
    weft_status_t st = t->algo->progress(t);
    if (st != WEFT_IN_PROGRESS) return st;
    if (moved) {
      idle = 0;
      continue;
    }
    if (++idle % CLOCK_EVERY == 0) {
      now = weft__now_ns();
      weft__flight_poll(comm, &comm->flight); /* another thread asked for a snapshot */
      if (idle == CLOCK_EVERY) last_move = now;
      /* A short call's start, taken once it has waited past the spin (lib/flight.h). */
      if (idle == SPIN_ITERS) weft__flight_waiting(&comm->flight);
      if (last_health == 0) last_health = now;
      if (started == 0) started = now;
      if (now - last_move > (uint64_t)comm->timeout_ms * 1000000ull) return timed_out(t);
      if (now - started > (uint64_t)comm->timeout_ms * 1000000ull) return too_long(t);
      if (idle >= SPIN_ITERS && now - last_health > HEALTH_EVERY_NS) {
        last_health = now;
        if ((st = check_health(t)) != WEFT_IN_PROGRESS) return st;
      }
    }
    int woke_to_work = 0;
    WEFT_TRY(back_off(t, idle, idle >= CLOCK_EVERY ? now - last_move : 0, &woke_to_work));
    if (woke_to_work) idle = 0;
  }
}

/* drive inlined into weft__task_run, whose blocking small call it is most of; the other
 * caller (lib/check.c) takes this copy. */
weft_status_t weft__task_drive(weft__task *t) { return drive(t); }

static weft_status_t check_usable(weft__task *t) {
  struct weft_comm *comm = t->comm;
  if (atomic_load(&comm->aborted))
    return weft__error(comm, WEFT_ERR_ABORTED, "rank %d: the communicator was aborted", comm->rank);
  if (atomic_load(&comm->revoked)) return weft__comm_revoked_error(comm, NULL);
  if (comm->broken)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                       "rank %d: the communicator is unusable after an earlier error; destroy or abort it",
                       comm->rank);
  return WEFT_SUCCESS;
}

/* When a transfer fails because a peer went away, that peer may only be a survivor that
 * gave up on the rank that really failed. The bootstrap root knows which rank failed first;
 * wait briefly for its notice so the message names the cause, not a bystander. NULL when
 * the root reports nothing within 200 ms. */
static const char *root_reported_failure(struct weft_comm *comm) {
  static __thread char text[320];
  uint64_t deadline = weft__now_ns() + 200000000ull;
  int failed;
  const char *why;
  while (weft__bootstrap_check_failure(comm, &failed, &why) == WEFT_SUCCESS) {
    if (weft__now_ns() >= deadline || comm->bootstrap_fd < 0) return NULL;
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  if (failed < 0 && (comm->root_host_rank < 0 || comm->root_host_rank == comm->rank))
    return NULL; /* a root no rank hosts is gone: it names nobody */
  if (failed < 0) /* the root died with the process of the rank that hosted it */
    snprintf(text, sizeof(text), "peer %d failed: its process, which hosted the bootstrap root, exited "
             "or failed (the root's connection closed)", comm->root_host_rank);
  else
    snprintf(text, sizeof(text), "peer %d failed: %s", failed, why);
  return text;
}

/* Every transport's PLACEMENT hook (shm's placement probe), in registry order: every rank
 * runs them at the same point of every operation. comm->before lists them (lib/connect.c).
 * A call below all their before_min_bytes skips them: a hook has nothing to do there, and
 * its call was ~45 instructions of an 8-byte broadcast's ~1000 (callgrind). */
static weft_status_t before_collective(weft__task *t) {
  if (t->comm->check_all && t->coll < WEFT__COLL_SEND) WEFT_TRY(weft__check_call(t));
  if (t->count * weft__dtype_size(t->dtype) < t->comm->before_min_bytes) return WEFT_SUCCESS;
  for (int i = 0; i < t->comm->nbefore; i++) WEFT_TRY(t->comm->before[i](t));
  return WEFT_SUCCESS;
}

weft_status_t weft__task_run(weft__task *t) {
  struct weft_comm *comm = t->comm;
  WEFT_TRY(weft__comm_wait_ready(comm));
  weft__op_lock_take(&comm->lock);
  comm->last_seq++;
  /* Collectives are numbered per communicator, which every rank counts alike, so the
   * number in a message or an error means the same call on every rank; sends and receives
   * are numbered per rank (their messages per pair: algos/p2p/p2p.c). */
  if (t->coll < WEFT__COLL_SEND) {
    t->seq = ++comm->coll_seq;
    comm->call.fp = weft__fp_make(t->coll, t->seq, t->count, t->dtype, t->op, t->root);
    comm->call.hash = weft__fp_hash(&comm->call.fp);
  } else {
    t->seq = ++comm->p2p_seq;
  }
  weft_status_t st = check_usable(t);
  int ran = 0; /* drive ran: on error, requests may be queued */
  if (st == WEFT_SUCCESS) {
    t->algo = weft__select_algo(t);
    int timed = t->coll == WEFT__COLL_P2P_GROUP || t->coll == WEFT__COLL_ALL_TO_ALLV ||
                t->count * weft__dtype_size(t->dtype) >= WEFT__FLIGHT_TIMED_BYTES;
    weft__flight_begin(&comm->flight, t->seq, t->coll == WEFT__COLL_P2P_GROUP ? (uint64_t)t->np2p : t->count,
                       t->algo != NULL ? t->algo->name : "", t->root, t->peer, t->coll, t->dtype, t->op, timed);
    st = t->algo != NULL ? before_collective(t)
                         : weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: no %s algorithm handles "
                                       "buffers in %s memory", comm->rank, weft__coll_name(t->coll),
                                       t->mem->name);
    if (st == WEFT_SUCCESS) st = t->algo->start(t);
    if (st == WEFT_SUCCESS || st == WEFT_IN_PROGRESS) {
      /* one warning, with the operation named, instead of two */
      atomic_store_explicit(&comm->errors_quiet, 1, memory_order_relaxed);
      st = drive(t);
      atomic_store_explicit(&comm->errors_quiet, 0, memory_order_relaxed);
      /* The user reads the results next: an asynchronous space's work must be done. */
      if (!(t->mem->flags & WEFT__MEM_SYNC)) weft__mem_wait(t->mem);
      ran = 1;
    }
  }
  if (st == WEFT_SUCCESS) weft__flight_end(&comm->flight, st);
  if (st != WEFT_SUCCESS) {
    char what[160], msg[1024];
    snprintf(msg, sizeof(msg), "%s", weft__thread_last_error());
    const char *culprit = st == WEFT_ERR_REMOTE ? root_reported_failure(comm) : NULL;
    const char *why = culprit != NULL ? strstr(culprit, "failed: ") : NULL;
    if (why != NULL && strstr(msg, why + 8) != NULL)
      culprit = NULL; /* this rank's message already says why: no second copy */
    if (culprit != NULL)
      weft__error(comm, st, "rank %d: %s (seen here as: %s) [in %s]", comm->rank, culprit, msg,
                  weft__task_describe(t, what, sizeof(what)));
    else
      weft__error(comm, st, "%s [in %s]", msg, weft__task_describe(t, what, sizeof(what)));
    /* The record first: it shows the requests still queued, which the drop below ends. */
    weft__flight_failed(comm, st, weft__thread_last_error());
    if (ran) {
      weft__comm_drop_requests(comm);
      comm->broken = 1;
    }
  }
  weft__flight_poll(comm, &comm->flight);
  weft__op_lock_release(&comm->lock);
  return st;
}

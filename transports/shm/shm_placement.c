/* shm_placement.c: the placement probe and the non-temporal copy decision; see
 * shm_placement.h.
 *
 * The probe line holds (generation << 32) | step. The initiator writes odd steps, the
 * responder answers each with the next even one, so each side only ever waits for one
 * value and a late partner, or the last value of the previous probe, is never mistaken for
 * an answer. The generation is the communicator's count of probes, the same on every rank.
 * Ideas: the cache-line ping-pong of core-to-core latency benchmarks; no code taken. */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include "lib/bootstrap.h"
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/env.h"
#include "lib/ft.h"
#include "lib/log.h"
#include "lib/req.h"
#include "lib/status.h"
#include "lib/task.h"
#include "topo/topo.h"
#include "transports/shm/shm_conn.h"
#include "transports/shm/shm_copy_probe.h"
#include "transports/shm/shm_placement.h"
#include "transports/shm/shm_state.h"
#include "transports/transport.h"

int weft__shm_nt_mode(void) {
  const char *name = weft__env_name("WEFT_SHM_NT_COPY", "WEFT_SHM_STREAM");
  const char *v = weft__env_str(name, "auto");
  if (strcmp(v, "auto") == 0) return WEFT__SHM_NT_AUTO;
  if (strcmp(v, "1") == 0) return WEFT__SHM_NT_ALWAYS;
  if (strcmp(v, "0") == 0) return WEFT__SHM_NT_NEVER;
  WEFT_WARN("%s=%s is not auto, 0 or 1; using auto", name, v);
  return WEFT__SHM_NT_AUTO;
}

/* One side of a probe: which line, which step it waits for next, and its timings. */
typedef struct {
  _Atomic uint64_t *line;
  uint64_t gen;
  int trips;          /* round trips in all: TRIPS_TOTAL, or 1 (a rendezvous: pair_trips) */
  int step;           /* initiator: round trips done; responder: answers given */
  int done;
  int time_answers;   /* responder: time its answers too (ranks outnumbering cores) */
  uint64_t batch_at;  /* when the current batch of round trips began (initiator, or such a responder) */
  uint64_t best_ns;   /* the fastest batch's mean round trip so far (likewise) */
} probe_side;

/* The first round trip absorbs the partners' skew; then BATCHES batches of BATCH_TRIPS,
 * each timed as a whole (one clock read per batch: a read costs about 25 ns here, a
 * sizeable part of a 60-100 ns round trip, and the clock ticks in 10 ns steps). */
enum { TRIPS_TOTAL = 1 + WEFT__SHM_PROBE_BATCHES * WEFT__SHM_PROBE_BATCH_TRIPS };

/* Advances the initiator as far as it can; returns 1 when it moved. */
static int initiate(probe_side *p) {
  if (p->done) return 0;
  if (atomic_load_explicit(p->line, memory_order_acquire) != weft__shm_probe_word(p->gen, 2 * (uint64_t)p->step + 2))
    return 0;
  int timed = ++p->step - 1; /* timed round trips completed */
  if (timed % WEFT__SHM_PROBE_BATCH_TRIPS == 0) {
    uint64_t now = weft__now_ns();
    uint64_t mean = (now - p->batch_at) / WEFT__SHM_PROBE_BATCH_TRIPS;
    if (timed > 0 && mean < p->best_ns) p->best_ns = mean;
    p->batch_at = now;
  }
  if (p->step == p->trips) {
    p->done = 1;
    return 1;
  }
  atomic_store_explicit(p->line, weft__shm_probe_word(p->gen, 2 * (uint64_t)p->step + 1), memory_order_release);
  return 1;
}

/* Answers the initiator's pending step, if it came; returns 1 when it did. A timing
 * responder reads the clock after every BATCH_TRIPS-th answer is out (the answer first, so
 * the read delays no round trip): answers k and k + BATCH_TRIPS are that many round trips
 * apart, as the initiator's batches are. */
static int respond(probe_side *p) {
  if (p->done) return 0;
  if (atomic_load_explicit(p->line, memory_order_acquire) != weft__shm_probe_word(p->gen, 2 * (uint64_t)p->step + 1))
    return 0;
  atomic_store_explicit(p->line, weft__shm_probe_word(p->gen, 2 * (uint64_t)p->step + 2), memory_order_release);
  int answered = p->step; /* answers before this one */
  if (p->time_answers && answered % WEFT__SHM_PROBE_BATCH_TRIPS == 0) {
    uint64_t now = weft__now_ns();
    uint64_t mean = (now - p->batch_at) / WEFT__SHM_PROBE_BATCH_TRIPS;
    if (answered > 0 && mean < p->best_ns) p->best_ns = mean;
    p->batch_at = now;
  }
  if (++p->step == p->trips) p->done = 1;
  return 1;
}

static weft__shm_conn *shm_peer(struct weft_comm *comm, int peer) {
  if (peer == comm->rank) return NULL;
  weft__conn *c = weft__comm_conn(comm, peer);
  return c->tr == &weft__transport_shm ? c->priv : NULL;
}

/* This rank's ring position and the ranks after and before it (algos/ring.h's order). */
static int ring_neighbours(const struct weft_comm *comm, int *next, int *prev) {
  int n = comm->nranks, pos = comm->ring_pos != NULL ? comm->ring_pos[comm->rank] : comm->rank;
  int pn = (pos + 1) % n, pp = (pos + n - 1) % n;
  *next = comm->ring != NULL ? comm->ring[pn] : pn;
  *prev = comm->ring != NULL ? comm->ring[pp] : pp;
  return pos;
}

/* The phase in which the rank at ring position pos probes its successor: even positions
 * first, odd ones next, and with an odd count the last position alone in a third phase,
 * so no rank initiates and answers in the same phase (polling two lines at once added
 * 30-60 ns to every round trip and blurred one L3 into two). */
static int phase_of(int pos, int n) { return n % 2 == 1 && pos == n - 1 ? 2 : pos % 2; }

/* Why the probe with peer cannot go on, or WEFT_SUCCESS: the communicator was aborted (by
 * another thread) or revoked (by any rank: a rank that revokes instead of joining the call
 * never answers, and its partners must return WEFT_ERR_REVOKED as lib/task.c's waits do,
 * not time out), the root reported a failed rank, or the peer's process is gone. Costs a
 * few syscalls (the root's socket, /proc): called at most every LIVENESS_NS. */
static weft_status_t probe_blocked(struct weft_comm *comm, int peer) {
  if (atomic_load(&comm->aborted))
    return weft__error(comm, WEFT_ERR_ABORTED, "rank %d: shm placement probe with peer %d: the "
                       "communicator was aborted", comm->rank, peer);
  if (atomic_load(&comm->revoked)) return weft__comm_revoked_error(comm, "shm placement probe");
  int failed;
  const char *why;
  if (weft__bootstrap_check_failure(comm, &failed, &why) != WEFT_SUCCESS && failed >= 0)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: shm placement probe with peer %d: %s",
                       comm->rank, peer, why);
  weft__conn *c = weft__comm_conn(comm, peer);
  if ((c->caps & WEFT__TRANSPORT_CAP_LIVENESS) && c->tr->peer_failed(comm, peer, &why))
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: shm placement probe: peer %d %s",
                       comm->rank, peer, why);
  return WEFT_SUCCESS;
}

/* Waiting for a partner that has not come: liveness looked at every LIVENESS_NS, and after
 * SPIN_NS without a move the wait sleeps NAP_NS at a time instead of spinning (the partner
 * may be in a long computation; the first round trip is untimed, so a late wake-up costs
 * nothing in the measurement). */
#define PROBE_LIVENESS_NS 2000000ull
#define PROBE_SPIN_NS 2000000ull
#define PROBE_NAP_NS 100000L

/* Polls until *done, the deadline, an abort or the partner's failure; poll(arg) returns 1
 * when it moved. The hot loop reads no clock (a read would distort the timed round trips):
 * only every 1024 idle polls. */
static weft_status_t drive(struct weft_comm *comm, int peer, int (*poll)(void *), void *arg, const int *done) {
  uint64_t now = weft__now_ns(), deadline = now + (uint64_t)comm->timeout_ms * 1000000ull;
  uint64_t idle_since = now, checked_at = now;
  int moved_since_look = 0;
  for (unsigned polls = 1; !*done; polls++) {
    if (poll(arg)) {
      moved_since_look = 1;
      continue;
    }
    if (polls % 1024 != 0) continue;
    now = weft__now_ns();
    if (moved_since_look) idle_since = now;
    moved_since_look = 0;
    if (now > deadline)
      return weft__error(comm, WEFT_ERR_TIMEOUT,
                         "rank %d: shm placement probe: no answer from peer %d within %d ms",
                         comm->rank, peer, comm->timeout_ms);
    if (now - checked_at >= PROBE_LIVENESS_NS) {
      checked_at = now;
      WEFT_TRY(probe_blocked(comm, peer));
    }
    if (now - idle_since < PROBE_SPIN_NS) {
      sched_yield(); /* a partner still in its previous call: let it run if it shares our core */
    } else {
      struct timespec ts = {0, PROBE_NAP_NS};
      nanosleep(&ts, NULL);
    }
  }
  return WEFT_SUCCESS;
}

static int poll_initiate(void *p) { return initiate(p); }
static int poll_respond(void *p) { return respond(p); }

/* One role of the round trips until done (or an error, as drive's). */
static weft_status_t run_side(struct weft_comm *comm, probe_side *p, int initiator, int peer) {
  if (initiator) atomic_store_explicit(p->line, weft__shm_probe_word(p->gen, 1), memory_order_release);
  return drive(comm, peer, initiator ? poll_initiate : poll_respond, p, &p->done);
}

typedef struct {
  _Atomic uint64_t *line;
  uint64_t want;
  int done;
} awaited;

static int poll_awaited(void *arg) {
  awaited *a = arg;
  if (atomic_load_explicit(a->line, memory_order_acquire) != a->want) return 0;
  a->done = 1;
  return 1;
}

weft_status_t weft__shm_probe_await(struct weft_comm *comm, _Atomic uint64_t *line, uint64_t value, int peer) {
  awaited a = {line, value, 0};
  return drive(comm, peer, poll_awaited, &a, &a.done);
}

/* Bytes per rank of a collective whose sizes every rank shares, 0 for any other. */
static size_t uniform_call_bytes(const weft__task *t) {
  switch (t->coll) {
  case WEFT__COLL_ALL_REDUCE: case WEFT__COLL_BROADCAST: case WEFT__COLL_REDUCE:
  case WEFT__COLL_ALL_GATHER: case WEFT__COLL_REDUCE_SCATTER: case WEFT__COLL_ALL_TO_ALL:
  case WEFT__COLL_GATHER: case WEFT__COLL_SCATTER:
    return t->count * weft__dtype_size(t->dtype);
  default:
    return 0; /* sizes may differ between ranks (all-to-all-v), or not every rank takes part */
  }
}

/* A measured round trip to peer on connection c: its peer_rt_ns and, in auto mode, how
 * large payloads are written (shm_placement.h). */
static void set_placement(struct weft_comm *comm, weft__shm_conn *c, int peer, uint64_t best_ns) {
  unsigned best = best_ns > UINT32_MAX ? UINT32_MAX : (unsigned)best_ns;
  int split = best > WEFT__SHM_SPLIT_NS;
  c->peer_rt_ns = best;
  if (c->nt_mode == WEFT__SHM_NT_AUTO && c->nt_out != split) {
    if (split)
      WEFT_INFO("shm: rank %d -> peer %d: %u ns per cache-line round trip, two L3s; payloads from %u bytes bypass "
                "the cache", comm->rank, peer, best, WEFT__SHM_NT_MIN);
    else
      WEFT_INFO("shm: rank %d -> peer %d: %u ns per cache-line round trip, one L3; payloads go through the cache",
                comm->rank, peer, best);
    c->nt_out = split;
  }
}

/* The initiator's conclusion from the round trips with its successor. The fastest batch
 * counts: a disturbance (an interrupt, the partner descheduled) only ever makes a batch
 * slower, and two L3s never make one fast. One probe in the 2-rank all-reduce runs
 * measured a median batch of 2109 ns with one L3. */
static void take_placement(struct weft_comm *comm, weft__shm_conn *to, int next, const probe_side *out) {
  set_placement(comm, to, next, out->best_ns);
  WEFT_TRACE("shm: placement probe %llu: rank %d -> peer %d: %llu ns per round trip",
             (unsigned long long)out->gen, comm->rank, next, (unsigned long long)out->best_ns);
}

/* The one CPU rank may run on (its CPU set in the topology view, taken at init), or -1
 * when it may run on several or the view has none. */
static int sole_cpu(const struct weft_comm *comm, int rank) {
  if (comm->topo == NULL) return -1;
  const uint8_t *set = comm->topo->ranks[rank].cpuset;
  return weft__topo_cpuset_count(set) == 1 ? weft__topo_cpuset_first(set) : -1;
}

/* Round trips of the probe from rank a to its successor b: all of them, but with more ranks
 * than cores only between two ranks bound to two different CPUs (a partner that is not
 * running makes a round trip a context switch and says nothing about caches, and two ranks
 * on one CPU share every cache); otherwise 1, a rendezvous for the copy probe. Pure: both
 * sides compute it alike from the same view. */
static int pair_trips(const struct weft_comm *comm, int a, int b) {
  if (!comm->oversubscribed) return TRIPS_TOTAL;
  int ca = sole_cpu(comm, a), cb = sole_cpu(comm, b);
  return ca >= 0 && cb >= 0 && ca != cb ? TRIPS_TOTAL : 1;
}

/* With more ranks than cores, whether any two ring neighbours on this rank's host take
 * round trips (pair_trips): if none, the probe runs once, for the copy probe, and never
 * again. The same on every rank of the host, the only ones it meets in a probe. */
static int oversub_measurable(const struct weft_comm *comm) {
  if (comm->topo == NULL || comm->ring == NULL) return 0;
  int host = comm->topo->ranks[comm->rank].host;
  for (int p = 0; p < comm->nranks; p++) {
    int a = comm->ring[p], b = comm->ring[(p + 1) % comm->nranks];
    if (comm->topo->ranks[a].host == host && comm->topo->ranks[b].host == host && pair_trips(comm, a, b) > 1)
      return 1;
  }
  return 0;
}

/* With more ranks than cores a probe's round trips measure two CPUs, not two ranks: every
 * shm connection to a rank bound to the CPU of the successor (or predecessor) whose round
 * trips this rank timed takes that placement, and one to a rank on this rank's own CPU
 * writes through the cache (they share it). Why: the ring's other connections (all-to-all,
 * broadcast trees) cross between the same two cores. */
static void take_cpu_placement(struct weft_comm *comm, weft__shm_state *state, int next, const probe_side *out,
                               int prev, const probe_side *in) {
  int own = sole_cpu(comm, comm->rank);
  int cpu_next = out->done && out->trips > 1 ? sole_cpu(comm, next) : -1;
  int cpu_prev = in->done && in->trips > 1 ? sole_cpu(comm, prev) : -1;
  if (own < 0) return;
  for (int i = 0; i < state->npeers; i++) {
    weft__shm_conn *c = &state->conns[i];
    int peer = state->peers[i], cpu = sole_cpu(comm, peer);
    if (cpu < 0) continue;
    if (cpu == own && c->nt_mode == WEFT__SHM_NT_AUTO) c->nt_out = 0;
    else if (cpu == cpu_next) set_placement(comm, c, peer, out->best_ns);
    else if (cpu == cpu_prev) set_placement(comm, c, peer, in->best_ns);
  }
  if (cpu_next >= 0)
    WEFT_TRACE("shm: placement probe %llu: rank %d -> peer %d: %llu ns per round trip (CPU %d to CPU %d)",
               (unsigned long long)out->gen, comm->rank, next, (unsigned long long)out->best_ns, own, cpu_next);
  if (cpu_prev >= 0)
    WEFT_TRACE("shm: placement probe %llu: rank %d <- peer %d: %llu ns per round trip (CPU %d to CPU %d)",
               (unsigned long long)in->gen, comm->rank, prev, (unsigned long long)in->best_ns, own, cpu_prev);
}

/* With more ranks than cores, after the copy probe: the verdict measured between two CPUs
 * (weft__shm_cpu_verdict says why) serves every shm connection of this rank to a rank bound
 * to one CPU, in both directions of the pairs on its own CPU (copy_verdict_back too, which
 * held the other rank's same-CPU measurement, so weft__shm_pair_verdict sees it twice). */
static void take_cpu_copy_verdict(struct weft_comm *comm, weft__shm_state *state, int next,
                                  const weft__shm_conn *to, int prev, const weft__shm_conn *from) {
  int own = sole_cpu(comm, comm->rank);
  int cpu_next = to != NULL && to->copy_verdict_own ? sole_cpu(comm, next) : -1;
  int cpu_prev = from != NULL ? sole_cpu(comm, prev) : -1;
  unsigned v = weft__shm_cpu_verdict(own, cpu_next, to != NULL ? to->copy_verdict : 0, cpu_prev,
                                     from != NULL ? from->copy_verdict_back : 0);
  if (v == 0) return;
  for (int i = 0; i < state->npeers; i++) {
    weft__shm_conn *c = &state->conns[i];
    int cpu = sole_cpu(comm, state->peers[i]);
    if (cpu < 0) continue;
    c->copy_verdict = v;
    if (cpu == own) c->copy_verdict_back = v;
  }
  if (v != state->cpu_verdict)
    WEFT_INFO("shm: rank %d: more ranks than cores: the copy verdict measured between CPU %d and CPU %d (%#x: "
              "all-gather and all-to-all on %s from 64 KiB) serves all its connections, to ranks on CPU %d too",
              comm->rank, own, cpu_next >= 0 && cpu_next != own ? cpu_next : cpu_prev, v,
              v & WEFT__SINGLE_COPY_TWO_WAY ? "one copy" : "two copies", own);
  state->cpu_verdict = v;
}

/* One rank's part of a probe: the round trips toward its successor as initiator, then the
 * copy probe's send; or those from its predecessor as responder, then the copy probe's
 * answer. */
static weft_status_t probe_out(struct weft_comm *comm, weft__shm_state *state, weft__shm_conn *to, int next,
                               probe_side *out) {
  out->line = &to->out.ctrl->probe;
  WEFT_TRY(run_side(comm, out, 1, next));
  /* Before the copy probe, which writes its test payload as nt_out says; with more ranks
   * than cores take_cpu_placement then applies it to the CPU's other connections too. */
  if (out->trips > 1 && !comm->oversubscribed) take_placement(comm, to, next, out);
  else if (out->trips > 1) set_placement(comm, to, next, out->best_ns);
  return weft__shm_copy_probe_send(comm, state, to, next, out->gen, 2u * (uint32_t)out->trips, to->nt_out);
}

static weft_status_t probe_in(struct weft_comm *comm, weft__shm_state *state, weft__shm_conn *from, int prev,
                              probe_side *in) {
  in->line = &from->in.ctrl->probe;
  WEFT_TRY(run_side(comm, in, 0, prev));
  return weft__shm_copy_probe_answer(comm, state, from, prev, in->gen, 2u * (uint32_t)in->trips);
}

weft_status_t weft__shm_placement_check(weft__task *t) {
  struct weft_comm *comm = t->comm;
  size_t bytes = uniform_call_bytes(t);
  if (comm->nranks < 2 || bytes < WEFT__SHM_PROBE_FIRST_MIN) return WEFT_SUCCESS;
  weft__shm_state *state = weft__shm_state_of(comm);
  if (state == NULL) return WEFT_SUCCESS;
  /* The schedule (shm_placement.h): the first collective of WEFT__SHM_PROBE_FIRST_MIN bytes,
   * the first of WEFT__SHM_PROBE_MIN, then by calls and bytes since the last, and every
   * WEFT__SHM_PROBE_EVERY_SMALL smaller ones. */
  if (!weft__shm_probe_due(state->placement_probes, &state->placement_calls, &state->placement_since_calls,
                           &state->placement_since_bytes, &state->placement_since_small, bytes))
    return WEFT_SUCCESS;
  /* With more ranks than cores and no pair to time (pair_trips), the first probe only: a
   * rendezvous for the copy probe. */
  if (comm->oversubscribed && state->placement_probes > 0 && !oversub_measurable(comm)) return WEFT_SUCCESS;
  int next, prev, n = comm->nranks;
  int pos = ring_neighbours(comm, &next, &prev);
  weft__shm_conn *to = shm_peer(comm, next), *from = shm_peer(comm, prev);
  /* Every rank takes part whatever its WEFT_SHM_NT_COPY: its partners cannot know it. */
  uint64_t gen = ++state->placement_probes;
  probe_side out = {.gen = gen, .trips = pair_trips(comm, comm->rank, next), .best_ns = UINT64_MAX};
  probe_side in = {.gen = gen, .trips = pair_trips(comm, prev, comm->rank), .best_ns = UINT64_MAX,
                   .time_answers = comm->oversubscribed};
  if (comm->oversubscribed) {
    /* One pair at a time, along the ring: a rank answers its predecessor, then probes its
     * successor, except the first of the host's stretch of the ring (position 0, or a
     * predecessor on another host), which begins. The ranks not in the pair wait, yielding
     * their cores to it, so the two that time are running. */
    int first = pos == 0 || from == NULL;
    if (!first) WEFT_TRY(probe_in(comm, state, from, prev, &in));
    if (to != NULL) WEFT_TRY(probe_out(comm, state, to, next, &out));
    if (first && from != NULL) WEFT_TRY(probe_in(comm, state, from, prev, &in));
    take_cpu_placement(comm, state, next, &out, prev, &in);
    take_cpu_copy_verdict(comm, state, next, to, prev, from);
    return WEFT_SUCCESS;
  }
  for (int phase = 0; phase < 3; phase++) {
    if (to != NULL && phase_of(pos, n) == phase) WEFT_TRY(probe_out(comm, state, to, next, &out));
    if (from != NULL && phase_of((pos + n - 1) % n, n) == phase) WEFT_TRY(probe_in(comm, state, from, prev, &in));
  }
  return WEFT_SUCCESS;
}

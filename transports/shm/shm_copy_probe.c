/* shm_copy_probe.c: the copy probe; see shm_copy_probe.h.
 *
 * Steps on the probe line (after first_step): the sender writes first_step + 2k + 1 when
 * round k's payload and address are in place, the receiver first_step + 2k + 2 when its
 * times are in the line beside it. A skip is round 0 with address 0. Both sides know round
 * k's size from k (round_bytes). */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/log.h"
#include "lib/req.h"
#include "lib/status.h"
#include "mem/nt_copy.h"
#include "transports/shm/shm_copy_probe.h"
#include "transports/shm/shm_fifo.h"
#include "transports/shm/shm_placement.h"

/* Bytes of the test message this FIFO holds: its payload slots, at most the probe's size,
 * whole pages (every rank has the same FIFO settings, so both sides agree). */
static size_t probe_bytes(const weft__shm_fifo *f) {
  uint64_t room = f->nslots * f->slot_bytes;
  size_t n = room < WEFT__SHM_COPY_PROBE_BYTES ? (size_t)room : WEFT__SHM_COPY_PROBE_BYTES;
  return n / WEFT__SHM_PAGE * WEFT__SHM_PAGE;
}

/* The classes of rounds, in this order (shm_copy_probe.h): the small message's uncounted
 * round (the receiver's buffer and the single-copy path touched for the first time: 16 KiB
 * copied out in 9-12 us, against 1.6 later), SMALL_REPEATS rounds of each of its states,
 * then REPEATS of each of the large message's. */
enum { SMALL_FIRST, SMALL_FRESH, SMALL_AGAIN, LARGE_FRESH, LARGE_AGAIN, NCLASSES };

static int round_class(uint32_t k) {
  static const uint32_t rounds[NCLASSES] = {1, WEFT__SHM_COPY_PROBE_SMALL_REPEATS, WEFT__SHM_COPY_PROBE_SMALL_REPEATS,
                                            WEFT__SHM_COPY_PROBE_REPEATS, WEFT__SHM_COPY_PROBE_REPEATS};
  int c = 0;
  while (c < NCLASSES - 1 && k >= rounds[c]) k -= rounds[c++];
  return c;
}

/* Whether round k sends the message its predecessor sent, unchanged. */
static int sent_again(uint32_t k) { return round_class(k) == SMALL_AGAIN || round_class(k) == LARGE_AGAIN; }

/* Round k's test message: the small class's for the small rounds, then `large`. */
static size_t round_bytes(size_t large, uint32_t k) {
  return round_class(k) < LARGE_FRESH ? WEFT__SHM_COPY_PROBE_SMALL_BYTES : large;
}

static char *probe_buf(weft__shm_state *st) {
  if (st->copy_probe_buf == NULL) st->copy_probe_buf = aligned_alloc(WEFT__SHM_PAGE, WEFT__SHM_COPY_PROBE_BYTES);
  return st->copy_probe_buf;
}

static uint32_t clamp_ns(uint64_t ns) { return ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns; }

/* Whether the sender runs the measurement now (shm_copy_probe.h's schedule). */
static int due(const struct weft_comm *comm, const weft__shm_state *st, const weft__shm_conn *to, int split) {
  if (!st->copy_probe_on || to->cma_send_bytes == 0 || to->cma_all) return 0; /* off, unusable, or chosen */
  if (to->copy_probe_gen == 0) return 1;
  return !comm->oversubscribed && split != to->copy_probe_split;
}

unsigned weft__shm_copy_verdict(uint32_t in_ns, uint32_t out_ns, uint32_t read_ns) {
  /* read (1 + margin) < other, in integers: read (100 + margin) < other 100 */
  uint64_t read = (uint64_t)read_ns * (100 + WEFT__SHM_COPY_PROBE_MARGIN_PCT);
  uint64_t both = ((uint64_t)in_ns + out_ns) * 100, slower = (uint64_t)(in_ns > out_ns ? in_ns : out_ns) * 100;
  unsigned v = WEFT__SINGLE_COPY_MEASURED;
  if (read < both) v |= WEFT__SINGLE_COPY_TWO_WAY;
  if (read < slower) v |= WEFT__SINGLE_COPY_ONE_WAY;
  return v;
}

unsigned weft__shm_two_state_verdict(uint32_t in_ns, uint32_t out_ns, uint32_t fresh_read_ns, uint32_t again_read_ns) {
  unsigned v = weft__shm_copy_verdict(in_ns, out_ns, again_read_ns) & ~(unsigned)WEFT__SINGLE_COPY_ONE_WAY;
  /* fresh 100 <= (in + out) (100 + loss), in integers */
  uint64_t both = ((uint64_t)in_ns + out_ns) * (100 + WEFT__SHM_COPY_PROBE_FRESH_LOSS_PCT);
  if ((uint64_t)fresh_read_ns * 100 > both) v &= ~(unsigned)WEFT__SINGLE_COPY_TWO_WAY;
  /* again (100 + margin) < slower 100 */
  uint64_t again = (uint64_t)again_read_ns * (100 + WEFT__SHM_COPY_PROBE_AGAIN_MARGIN_PCT);
  if ((v & WEFT__SINGLE_COPY_TWO_WAY) && again < (uint64_t)(in_ns > out_ns ? in_ns : out_ns) * 100)
    v |= WEFT__SINGLE_COPY_AGAIN_ONE_WAY;
  return v | (weft__shm_copy_verdict(in_ns, out_ns, fresh_read_ns) & WEFT__SINGLE_COPY_ONE_WAY);
}

/* The times of one class (ns): the median of its rounds for the small message, the fastest
 * for the large one (shm_copy_probe.h says why). */
typedef struct probe_times {
  uint32_t in, out, read;
} probe_times;

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* Keeps round k's times in its class, unless k is not counted. */
static void record(weft__shm_probe_rounds *r, uint32_t k, uint32_t in, uint32_t out, uint32_t read) {
  int c = round_class(k);
  if (c == SMALL_FIRST) return;
  r[c].in[r[c].n] = in;
  r[c].out[r[c].n] = out;
  r[c].read[r[c].n] = read;
  r[c].n++;
}

/* The median of n > 0 values (the upper of the two middle ones for even n), or the fastest. */
static uint32_t middle_or_fastest(const uint32_t *v, int n, int median) {
  uint32_t s[WEFT__SHM_COPY_PROBE_SMALL_REPEATS];
  memcpy(s, v, (size_t)n * sizeof *s);
  for (int i = 1; i < n; i++) /* insertion sort: a handful of values */
    for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
      uint32_t x = s[j];
      s[j] = s[j - 1];
      s[j - 1] = x;
    }
  return median ? s[n / 2] : s[0];
}

/* One state's times from its rounds: each the median of the rounds, or the fastest (median 0);
 * UINT32_MAX each without rounds. */
static probe_times state_times(const weft__shm_probe_rounds *r, int median) {
  if (r->n <= 0) return (probe_times){UINT32_MAX, UINT32_MAX, UINT32_MAX};
  return (probe_times){middle_or_fastest(r->in, r->n, median), middle_or_fastest(r->out, r->n, median),
                       middle_or_fastest(r->read, r->n, median)};
}

/* The copies of two classes of one size (the same work in both): the fastest of either; a's read. */
static probe_times fastest(const probe_times *a, const probe_times *b) {
  return (probe_times){min_u32(a->in, b->in), min_u32(a->out, b->out), a->read};
}

unsigned weft__shm_rounds_verdict(const weft__shm_probe_rounds *fresh, const weft__shm_probe_rounds *again,
                                  int median) {
  probe_times f = state_times(fresh, median), a = state_times(again, median), c = fastest(&f, &a);
  return weft__shm_two_state_verdict(c.in, c.out, f.read, a.read);
}

/* Whether class c keeps its rounds' medians (the small message's) or the fastest. */
static int takes_medians(int c) { return c < LARGE_FRESH; }

/* Each class's times (t[NCLASSES]) from its rounds (r[NCLASSES]); SMALL_FIRST, not counted,
 * gets UINT32_MAX. */
static void class_times(const weft__shm_probe_rounds *r, probe_times *t) {
  for (int i = 0; i < NCLASSES; i++) t[i] = state_times(&r[i], takes_medians(i));
}

/* The verdict from the classes' rounds (r[NCLASSES]): the large size's, with the small one's
 * as WEFT__SINGLE_COPY_SMALL_*. */
static unsigned classes_verdict(const weft__shm_probe_rounds *r) {
  unsigned v = weft__shm_rounds_verdict(&r[LARGE_FRESH], &r[LARGE_AGAIN], takes_medians(LARGE_FRESH)) |
               WEFT__SINGLE_COPY_SMALL_MEASURED;
  if (weft__shm_rounds_verdict(&r[SMALL_FRESH], &r[SMALL_AGAIN], takes_medians(SMALL_FRESH)) &
      WEFT__SINGLE_COPY_TWO_WAY)
    v |= WEFT__SINGLE_COPY_SMALL_TWO_WAY;
  return v;
}

unsigned weft__shm_pair_verdict(unsigned ours, unsigned back) {
  const unsigned wins = WEFT__SINGLE_COPY_TWO_WAY | WEFT__SINGLE_COPY_ONE_WAY | WEFT__SINGLE_COPY_AGAIN_ONE_WAY |
                        WEFT__SINGLE_COPY_SMALL_TWO_WAY;
  if (!(ours & WEFT__SINGLE_COPY_MEASURED) || !(back & WEFT__SINGLE_COPY_MEASURED)) return ours;
  return (ours & ~wins) | (ours & back & wins);
}

unsigned weft__shm_cpu_verdict(int own_cpu, int next_cpu, unsigned to_next, int prev_cpu, unsigned from_prev) {
  if (own_cpu < 0) return 0;
  if (next_cpu >= 0 && next_cpu != own_cpu && (to_next & WEFT__SINGLE_COPY_MEASURED)) return to_next;
  if (prev_cpu >= 0 && prev_cpu != own_cpu && (from_prev & WEFT__SINGLE_COPY_MEASURED)) return from_prev;
  return 0;
}

/* Says at INFO when the two directions of a pair disagree, which weft__shm_pair_verdict
 * settles for two copies; once both are measured, from either side's last step. */
static void tell_disagreement(const struct weft_comm *comm, const weft__shm_conn *c, int peer) {
  unsigned ours = c->copy_verdict, back = c->copy_verdict_back;
  if (!c->copy_verdict_own || weft__shm_pair_verdict(ours, back) == ours) return;
  WEFT_INFO("shm: rank %d <-> peer %d: the peer's probe of its sends to us measured two copies faster where ours "
            "measured one (verdicts %#x and %#x): our sends stay on two copies there too", comm->rank, peer, back,
            ours);
}

/* Logs probe gen's times (TRACE) and, when it changed, the verdict (INFO); keeps the verdict
 * for our sends to `peer`, and for the connections not measured themselves. */
static void apply_verdict(struct weft_comm *comm, weft__shm_state *st, weft__shm_conn *to, int peer, uint64_t gen,
                          size_t n, const weft__shm_probe_rounds *r) {
  unsigned v = classes_verdict(r);
  probe_times t[NCLASSES];
  class_times(r, t);
  probe_times sm = fastest(&t[SMALL_FRESH], &t[SMALL_AGAIN]), lg = fastest(&t[LARGE_FRESH], &t[LARGE_AGAIN]);
  WEFT_TRACE("shm: copy probe %llu: rank %d -> peer %d: %u bytes in %u ns, out %u ns, read %u ns fresh, %u sent "
             "again; %zu bytes in %u ns, out %u ns, read %u ns fresh, %u sent again", (unsigned long long)gen,
             comm->rank, peer, WEFT__SHM_COPY_PROBE_SMALL_BYTES, sm.in, sm.out, sm.read, t[SMALL_AGAIN].read, n, lg.in,
             lg.out, lg.read, t[LARGE_AGAIN].read);
  if (v != to->copy_verdict || !to->copy_verdict_own)
    WEFT_INFO("shm: rank %d -> peer %d: %u KiB copied in %u ns and out %u ns, read by single copy in %u ns fresh "
              "and %u sent again; %u KiB in %u, out %u, read %u and %u: all-gather and all-to-all on %s below "
              "64 KiB and %s from it, broadcast on %s", comm->rank, peer, WEFT__SHM_COPY_PROBE_SMALL_BYTES / 1024u,
              sm.in, sm.out, sm.read, t[SMALL_AGAIN].read, (unsigned)(n / 1024), lg.in, lg.out, lg.read,
              t[LARGE_AGAIN].read, v & WEFT__SINGLE_COPY_SMALL_TWO_WAY ? "one copy" : "two copies",
              v & WEFT__SINGLE_COPY_TWO_WAY ? "one copy" : "two copies",
              v & WEFT__SINGLE_COPY_ONE_WAY         ? "one copy (up to 1 MiB)"
              : v & WEFT__SINGLE_COPY_AGAIN_ONE_WAY ? "one copy from 64 KiB to 1 MiB"
              : v & WEFT__SINGLE_COPY_TWO_WAY       ? "one copy from 256 KiB to 1 MiB"
                                              : "two copies");
  to->copy_verdict = v;
  to->copy_verdict_own = 1;
  for (int i = 0; i < st->npeers; i++)
    if (!st->conns[i].copy_verdict_own) st->conns[i].copy_verdict = v;
}

weft_status_t weft__shm_copy_probe_send(struct weft_comm *comm, weft__shm_state *st, weft__shm_conn *to,
                                        int peer, uint64_t gen, uint32_t first_step, int split) {
  weft__shm_fifo_ctrl *ctrl = to->out.ctrl;
  size_t n = probe_bytes(&to->out);
  /* Empty: the peer has taken every message we sent (a send completes once it is in the
   * FIFO, so one may still wait for a receive the peer posts after this call). */
  int empty = atomic_load_explicit(&ctrl->head, memory_order_acquire) == to->tail;
  char *buf = NULL;
  if (due(comm, st, to, split) && empty && n >= WEFT__SHM_COPY_PROBE_MIN_BYTES && (buf = probe_buf(st)) == NULL)
    return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: shm copy probe with peer %d: allocating %u bytes: %s",
                       comm->rank, peer, WEFT__SHM_COPY_PROBE_BYTES, strerror(ENOMEM));
  if (buf == NULL) { /* skipped: the peer learns it from the address 0 */
    ctrl->copy_probe_src = 0;
    atomic_store_explicit(&ctrl->probe, weft__shm_probe_word(gen, first_step + 1), memory_order_release);
    return weft__shm_probe_await(comm, &ctrl->probe, weft__shm_probe_word(gen, first_step + 2), peer);
  }
  weft__shm_payload_ready(to, n); /* the FIFO is empty: as before a message of n bytes */
  weft__shm_probe_rounds r[NCLASSES] = {0};
  for (uint32_t k = 0; k < WEFT__SHM_COPY_PROBE_ROUNDS; k++) {
    size_t m = round_bytes(n, k);
    /* a message just produced: its lines dirty in our cache; one sent again stays as sent */
    if (!sent_again(k)) memset(buf, (int)(gen + k) | 1, m);
    uint64_t t0 = weft__now_ns();
    if (weft__shm_payload_nt(to->nt_out, m)) weft__nt_copy(to->out.payload, buf, m); /* as shm.c's sends */
    else memcpy(to->out.payload, buf, m);
    uint32_t in = clamp_ns(weft__now_ns() - t0);
    ctrl->copy_probe_in_ns = in;
    ctrl->copy_probe_src = (uint64_t)(uintptr_t)buf;
    atomic_store_explicit(&ctrl->probe, weft__shm_probe_word(gen, first_step + 2 * k + 1), memory_order_release);
    WEFT_TRY(weft__shm_probe_await(comm, &ctrl->probe, weft__shm_probe_word(gen, first_step + 2 * k + 2), peer));
    record(r, k, in, ctrl->copy_probe_out_ns, ctrl->copy_probe_read_ns);
  }
  to->copy_probe_gen = gen;
  to->copy_probe_split = split;
  for (int i = SMALL_FRESH; i < NCLASSES; i++)
    for (int j = 0; j < r[i].n; j++)
      if (r[i].out[j] == 0) return WEFT_SUCCESS; /* the peer could not measure: keep what we had */
  apply_verdict(comm, st, to, peer, gen, n, r);
  tell_disagreement(comm, to, peer);
  return WEFT_SUCCESS;
}

/* Reads n bytes at the sender's address src by single copy; the time, or UINT32_MAX when
 * the read failed (the path is unusable: two copies win). */
static uint32_t timed_read(const weft__shm_conn *from, char *dst, uint64_t src, size_t n) {
  if (!from->cma_recv) return UINT32_MAX;
  uint64_t t0 = weft__now_ns();
  if (weft__shm_cma_read(from->pid, dst, src, n) != 0) return UINT32_MAX;
  return clamp_ns(weft__now_ns() - t0);
}

weft_status_t weft__shm_copy_probe_answer(struct weft_comm *comm, weft__shm_state *st, weft__shm_conn *from,
                                          int peer, uint64_t gen, uint32_t first_step) {
  weft__shm_fifo_ctrl *ctrl = from->in.ctrl;
  size_t n = probe_bytes(&from->in);
  weft__shm_probe_rounds r[NCLASSES] = {0};
  int measured = 1;
  for (uint32_t k = 0; k < WEFT__SHM_COPY_PROBE_ROUNDS; k++) {
    WEFT_TRY(weft__shm_probe_await(comm, &ctrl->probe, weft__shm_probe_word(gen, first_step + 2 * k + 1), peer));
    uint64_t src = ctrl->copy_probe_src;
    char *buf = src != 0 ? probe_buf(st) : NULL;
    if (buf != NULL) {
      size_t m = round_bytes(n, k);
      uint64_t t0 = weft__now_ns();
      memcpy(buf, from->in.payload, m);
      uint32_t out = clamp_ns(weft__now_ns() - t0), read = timed_read(from, buf, src, m);
      ctrl->copy_probe_out_ns = out;
      ctrl->copy_probe_read_ns = read;
      record(r, k, ctrl->copy_probe_in_ns, out, read);
    } else { /* skipped, or no memory here: 0, which no real copy takes, says not measured */
      ctrl->copy_probe_out_ns = 0;
      ctrl->copy_probe_read_ns = 0;
      measured = 0;
    }
    atomic_store_explicit(&ctrl->probe, weft__shm_probe_word(gen, first_step + 2 * k + 2), memory_order_release);
    if (src == 0) return WEFT_SUCCESS;
  }
  /* The sender's verdict, from the times it has too (its own copy-in, our copy-out and read). */
  if (measured) {
    from->copy_verdict_back = classes_verdict(r);
    tell_disagreement(comm, from, peer);
  }
  return WEFT_SUCCESS;
}

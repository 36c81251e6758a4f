/* all_reduce/recursive_doubling.c: recursive-doubling all-reduce, for small messages.
 *
 * With p2 the largest power of two <= n and rem = n - p2 (patterns.h, the fold):
 *   round 0        fold in: of the first 2 rem ranks, odd rank r sends its whole input to
 *                  r-1, which reduces it on arrival (its own data first: rank order).
 *   rounds 1 .. L  L = log2 p2 exchange steps among the p2 new ranks: at step k new rank v
 *                  swaps its whole partial result with v ^ 2^k and combines the two as
 *                  (lower new rank's data) op (higher new rank's data). Both partners compute
 *                  the same operation on the same operands in the same order, so every rank
 *                  ends with identical bits, for floats and NaNs too. The lower rank reduces
 *                  on arrival; the higher one receives into scratch and reduces after.
 *                  WEFT_AVG divides the final sum once, on every rank of the p2 (the same
 *                  bits in, the same bits out).
 *   round L+1      fold out: rank r-1 sends the result to the odd rank r.
 * Bytes each rank sends: L * count * size (+ count * size for fold ranks). Latency term:
 * L + 2 [rem > 0] steps of alpha, against 2(n-1) for the ring: the tuner picks it for small
 * messages. Scratch: 2 * count * size (a round reads one buffer while it fills the other).
 * The same exchange serves reduce-scatter for small messages (weft__algo_reduce_scatter_
 * recursive_doubling): it all-reduces the whole n * count input into a third scratch and
 * keeps this rank's block, in L + 2 [rem > 0] steps instead of the ring's n - 1. Each step
 * then moves n * count * size bytes, so the tuner keeps it to small blocks: with 4 ranks on
 * 2 cores every step is a wait that may cost a context switch, and the ring reduce-scatter
 * made 4.5x Open MPI's switches (128 B: 14.7 against 6.9 us per call).
 * Sources: Thakur, Rabenseifner & Gropp, "Optimization of collective communication
 * operations in MPICH" (IJHPCA 2005), section 4.1 (recursive doubling and the fold). */
#include <string.h>
#include "algos/patterns.h"
#include "algos/rounds.h"
#include "lib/dtype.h"

typedef struct {
  weft__rounds rounds;
  weft__rd_fold fold;
  int steps;        /* L */
  size_t bytes;     /* of the whole exchange: count (all-reduce) or n * count (reduce-scatter) */
  const char *in;   /* t->sendbuf */
  char *out;        /* the result: t->recvbuf, or for reduce-scatter a scratch of bytes */
  char *b0;         /* the input of step 0 */
  char *scratch[2];
  weft__req req[2];
} rd_state;

/* The buffer holding the result of step k-1 (input of step k), k = 0 .. L. */
static char *buf_at(weft__task *t, rd_state *st, int k) {
  if (k == 0) return st->b0;
  if (k == st->steps) return st->out;
  return st->scratch[(k - 1) % 2];
}

static int real_partner(const rd_state *st, int k) {
  return weft__rd_real(st->fold.newrank ^ (1 << k), st->fold.rem);
}

static void rd_post(weft__task *t, int i) {
  rd_state *st = t->state;
  weft__rounds *r = &st->rounds;
  int L = st->steps;
  if (i == 0) {
    if (st->fold.partner < 0) return;
    if (st->fold.newrank < 0) weft__round_send(r, t, st->fold.partner, st->in, st->bytes);
    else weft__round_recv(r, t, st->fold.partner, st->b0, st->in, st->bytes);
  } else if (i <= L) {
    if (st->fold.newrank < 0) return;
    int k = i - 1, peer = real_partner(st, k);
    int lower = st->fold.newrank < (st->fold.newrank ^ (1 << k));
    char *in = buf_at(t, st, k), *out = buf_at(t, st, k + 1);
    weft__round_send(r, t, peer, in, st->bytes);
    weft__round_recv(r, t, peer, out, lower ? in : NULL, st->bytes);
  } else {
    if (st->fold.partner < 0) return;
    if (st->fold.newrank < 0) weft__round_recv(r, t, st->fold.partner, st->out, NULL, st->bytes);
    else weft__round_send(r, t, st->fold.partner, st->out, st->bytes);
  }
}

static void rd_finish(weft__task *t, int i) {
  rd_state *st = t->state;
  if (i < 1 || i > st->steps || st->fold.newrank < 0) return;
  int k = i - 1;
  size_t count = st->bytes / weft__dtype_size(t->dtype);
  char *in = buf_at(t, st, k), *out = buf_at(t, st, k + 1);
  if (st->fold.newrank > (st->fold.newrank ^ (1 << k))) weft__mem_reduce(t->mem, out, out, in, count, t->dtype, t->op);
  if (k == st->steps - 1 && t->op == WEFT_AVG) weft__mem_avg(t->mem, out, count, t->dtype, t->comm->nranks);
}

/* whole: 1 for reduce-scatter (the exchange covers all n blocks, the result goes to a third
 * scratch and this rank's block to recvbuf when done), 0 for all-reduce. */
static weft_status_t rd_begin(weft__task *t, int whole) {
  int n = t->comm->nranks;
  size_t bytes = t->count * weft__dtype_size(t->dtype) * (whole ? (size_t)n : 1);
  int single = n == 1 || bytes == 0;
  size_t hdr = weft__align_up(sizeof(rd_state), 64), sbytes = weft__align_up(bytes, 64);
  weft_status_t status;
  /* not zeroed: every field the rounds read is set below (zeroing the header and scratch
   * cost an 8-byte call as much as zeroing a broadcast's state; lib/algo.h) */
  rd_state *st = weft__algo_state_take(t, hdr, single ? 0 : (whole ? 3 : 2) * sbytes, &status);
  if (st == NULL) return status;
  if (single) { /* n == 1 (so bytes is one block) or nothing to move */
    if (t->sendbuf != t->recvbuf) weft__mem_copy(t->mem, t->recvbuf, t->sendbuf, bytes, 0);
    st->out = NULL; /* rs_progress: nothing to copy out */
    weft__rounds_init(&st->rounds, 0, st->req, 2, rd_post, rd_finish);
    return WEFT_SUCCESS;
  }
  st->fold = weft__rd_fold_of(t->comm->rank, n);
  st->steps = weft__ceil_log2(st->fold.p2);
  st->bytes = bytes;
  st->scratch[0] = (char *)st + hdr;
  st->scratch[1] = (char *)st + hdr + sbytes;
  st->in = t->sendbuf;
  st->out = whole ? (char *)st + hdr + 2 * sbytes : (char *)t->recvbuf;
  /* Step 0 reads b0 and writes buf_at(1); they must differ, and b0 must hold the folded
   * sum on a rank that receives the fold. */
  int fold_in = st->fold.partner >= 0 && st->fold.newrank >= 0;
  int in_place = st->in == st->out;
  st->b0 = (char *)t->sendbuf;
  if (fold_in || (in_place && st->steps == 1)) {
    st->b0 = st->steps == 1 ? st->scratch[0] : st->scratch[1];
    if (!fold_in) weft__mem_copy(t->mem, st->b0, t->sendbuf, bytes, 0);
  }
  weft__rounds_init(&st->rounds, st->steps + 2, st->req, 2, rd_post, rd_finish);
  weft__rounds_progress(&st->rounds, t); /* posts round 0 */
  return WEFT_SUCCESS;
}

static weft_status_t rd_start(weft__task *t) { return rd_begin(t, 0); }

static weft_status_t rd_progress(weft__task *t) {
  rd_state *st = t->state;
  return weft__rounds_progress(&st->rounds, t);
}

static double ar_cost(const weft__cost_in *c) {
  /* Each step moves the whole buffer; the higher rank of a pair also makes a separate pass
   * to reduce in rank order (measured: 2.4x the ring's per-byte cost). */
  int lp = weft__ceil_log2(c->p2), fold = c->rem > 0 ? 2 : 0;
  return (lp + fold) * (c->a + c->bytes * c->b) + lp * c->bytes * (c->b + c->g);
}

/* The cap keeps this whole-message algorithm where it was measured to win: past the caches
 * its rounds stall on memory, which a linear model does not see (59 us at 512 KiB, 306 us
 * at 1 MiB on 2 ranks, while the ring went from 107 to 173 us). */
const weft__algo weft__algo_all_reduce_recursive_doubling = {
    .name = "recursive_doubling", .coll = WEFT__COLL_ALL_REDUCE, .start = rd_start,
    .progress = rd_progress, .cost = ar_cost, .max_bytes = 512 << 10, .spaces = WEFT__MEM_KINDS_CPU};

static weft_status_t rs_start(weft__task *t) { return rd_begin(t, 1); }

/* Done: this rank's block of the whole result (a scratch, so in-place is safe) to recvbuf. */
static weft_status_t rs_progress(weft__task *t) {
  rd_state *st = t->state;
  weft_status_t s = weft__rounds_progress(&st->rounds, t);
  if (s != WEFT_SUCCESS || st->out == NULL || st->out == (char *)t->recvbuf) return s;
  size_t block = t->count * weft__dtype_size(t->dtype);
  weft__mem_copy(t->mem, t->recvbuf, st->out + (size_t)t->comm->rank * block, block, 0);
  st->out = t->recvbuf; /* copied once */
  return s;
}

/* The all-reduce's exchange over all n blocks, then this rank's block copied out. */
static double rs_cost(const weft__cost_in *c) {
  weft__cost_in whole = *c;
  whole.bytes = c->bytes * c->n;
  return ar_cost(&whole) + c->bytes * c->b;
}

const weft__algo weft__algo_reduce_scatter_recursive_doubling = {
    .name = "recursive_doubling", .coll = WEFT__COLL_REDUCE_SCATTER, .start = rs_start,
    .progress = rs_progress, .cost = rs_cost, .max_bytes = 16 << 10, .spaces = WEFT__MEM_KINDS_CPU};

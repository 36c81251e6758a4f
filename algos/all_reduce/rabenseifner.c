/* all_reduce/rabenseifner.c: Rabenseifner's all-reduce = recursive-halving reduce-scatter,
 * then recursive-doubling all-gather, for medium messages.
 *
 * The count elements are split into p2 blocks (p2 = largest power of two <= n; ranks beyond
 * it fold in and out as in recursive_doubling.c, patterns.h). L = log2 p2.
 *   round 0            fold in (odd rank r < 2 rem sends its input to r-1, reduced on arrival).
 *   rounds 1 .. L      reduce-scatter: at step j (distance d = p2 / 2^(j+1)) new rank v holds
 *                      the 2d blocks of its group; it keeps the half on its side of v ^ d,
 *                      sends the other half to v ^ d and reduces the half it keeps on arrival.
 *                      After L steps new rank v holds block v fully reduced; only v computes
 *                      it, so every rank later receives the same bits. WEFT_AVG divides it
 *                      here, once.
 *   rounds L+1 .. 2L   all-gather: at step j (d = 2^j) v swaps its d reduced blocks with v ^ d.
 *   round 2L+1         fold out (r-1 sends the whole result to odd rank r).
 * A round reads and writes disjoint block ranges of recvbuf (sendbuf at step 0), so no
 * scratch is needed and in-place works.
 * Bytes each rank sends: 2 (p2-1)/p2 * count * size (+ count * size for fold ranks).
 * Latency term: 2 L (+ 2) steps. The tuner picks it between recursive doubling (small) and
 * the ring (large, pipelined). Sources: Rabenseifner, "Optimization of collective reduction
 * operations" (ICCS 2004); Thakur, Rabenseifner & Gropp 2005, section 4.4. */
#include <string.h>
#include "algos/patterns.h"
#include "algos/rounds.h"
#include "lib/dtype.h"

typedef struct {
  weft__rounds rounds;
  weft__rd_fold fold;
  int steps;
  size_t esize;
  weft__ring_layout layout; /* p2 blocks */
  weft__req req[2];
} rb_state;

/* Offset and size in bytes of blocks [lo, lo + nb). */
static size_t range_of(const rb_state *st, int lo, int nb, size_t *off) {
  size_t a = weft__ring_block_offset(&st->layout, lo);
  size_t b = weft__ring_block_offset(&st->layout, lo + nb);
  *off = a * st->esize;
  return (b - a) * st->esize;
}

static void rb_reduce_scatter_step(weft__task *t, rb_state *st, int j) {
  int v = st->fold.newrank, d = st->fold.p2 >> (j + 1);
  int lo = v & ~(2 * d - 1);
  int keep = (v & d) ? lo + d : lo, give = (v & d) ? lo : lo + d;
  int peer = weft__rd_real(v ^ d, st->fold.rem);
  /* Step 0 reads the input (recvbuf already holds it on a rank that took a fold). */
  const char *in = (j == 0 && st->fold.partner < 0) ? t->sendbuf : t->recvbuf;
  size_t goff, gbytes = range_of(st, give, d, &goff);
  size_t koff, kbytes = range_of(st, keep, d, &koff);
  weft__round_send(&st->rounds, t, peer, in + goff, gbytes);
  weft__round_recv(&st->rounds, t, peer, (char *)t->recvbuf + koff, in + koff, kbytes);
}

static void rb_all_gather_step(weft__task *t, rb_state *st, int j) {
  int v = st->fold.newrank, d = 1 << j;
  int lo = v & ~(d - 1);
  int peer = weft__rd_real(v ^ d, st->fold.rem);
  size_t moff, mbytes = range_of(st, lo, d, &moff);
  size_t poff, pbytes = range_of(st, lo ^ d, d, &poff);
  weft__round_send(&st->rounds, t, peer, (char *)t->recvbuf + moff, mbytes);
  weft__round_recv(&st->rounds, t, peer, (char *)t->recvbuf + poff, NULL, pbytes);
}

static void rb_post(weft__task *t, int i) {
  rb_state *st = t->state;
  weft__rounds *r = &st->rounds;
  size_t all = t->count * st->esize;
  int L = st->steps;
  if (i == 0 || i == 2 * L + 1) {
    if (st->fold.partner < 0) return;
    int out = i != 0; /* fold out: the result goes back to the odd rank */
    if (st->fold.newrank < 0 && !out) weft__round_send(r, t, st->fold.partner, t->sendbuf, all);
    if (st->fold.newrank < 0 && out) weft__round_recv(r, t, st->fold.partner, t->recvbuf, NULL, all);
    if (st->fold.newrank >= 0 && !out)
      weft__round_recv(r, t, st->fold.partner, t->recvbuf, t->sendbuf, all);
    if (st->fold.newrank >= 0 && out) weft__round_send(r, t, st->fold.partner, t->recvbuf, all);
    return;
  }
  if (st->fold.newrank < 0) return;
  if (i <= L) rb_reduce_scatter_step(t, st, i - 1);
  else rb_all_gather_step(t, st, i - 1 - L);
}

static void rb_finish(weft__task *t, int i) {
  rb_state *st = t->state;
  if (i != st->steps || st->fold.newrank < 0 || t->op != WEFT_AVG) return;
  size_t off, bytes = range_of(st, st->fold.newrank, 1, &off);
  if (bytes > 0)
    weft__mem_avg(t->mem, (char *)t->recvbuf + off, bytes / st->esize, t->dtype, t->comm->nranks);
}

static weft_status_t rb_start(weft__task *t) {
  int n = t->comm->nranks;
  weft_status_t status;
  rb_state *st = weft__algo_state_alloc(t, sizeof(rb_state), 0, &status);
  if (st == NULL) return status;
  st->esize = weft__dtype_size(t->dtype);
  size_t bytes = t->count * st->esize;
  if (n == 1 || bytes == 0) {
    if (t->sendbuf != t->recvbuf) weft__mem_copy(t->mem, t->recvbuf, t->sendbuf, bytes, 0);
    weft__rounds_init(&st->rounds, 0, st->req, 2, rb_post, rb_finish);
    return WEFT_SUCCESS;
  }
  st->fold = weft__rd_fold_of(t->comm->rank, n);
  st->steps = weft__ceil_log2(st->fold.p2);
  st->layout = weft__ring_layout_split(t->count, st->fold.p2, 1);
  weft__rounds_init(&st->rounds, 2 * st->steps + 2, st->req, 2, rb_post, rb_finish);
  weft__rounds_progress(&st->rounds, t); /* posts round 0 */
  return WEFT_SUCCESS;
}

static weft_status_t rb_progress(weft__task *t) {
  rb_state *st = t->state;
  return weft__rounds_progress(&st->rounds, t);
}

static double rb_cost(const weft__cost_in *c) {
  /* Its steps and bytes cost what recursive doubling's and the ring's do: each step waits
   * for one peer, as theirs do, and it moves and reduces the ring's bytes. Measured on the
   * family-6 model-167 VM (2026-12-03, WEFT_ALGO forced, medians of 3 launches, us per
   * call, recursive doubling / ring / Rabenseifner): 4 ranks on 2 cores, 1 KiB 3.2 / 9.4 /
   * 4.4 (fewer steps than the ring, so cheaper), 64 KiB 27 / 23 / 18, 256 KiB 136 / 87 / 77,
   * 1 MiB 767 / 422 / 440; 8 ranks, 64 KiB 104 / 71 / 48, 256 KiB 480 / 245 / 230. An older
   * cost counted each step twice and its bytes 1.5 times, from earlier figures these do not
   * reproduce (127 against the ring's 113 us at 8 B on 4 ranks, 822 against 600 us at 256
   * KiB on 8), so the tuner never picked it with more ranks than cores. With one fold-free level (2
   * ranks) its cost equals the ring's to the bit and the ring, the earlier row, keeps it. */
  int lp = weft__ceil_log2(c->p2), fold = c->rem > 0 ? 2 : 0;
  double frac = (double)(c->p2 - 1) / c->p2;
  return (2 * lp + fold) * c->a + (2 * frac + fold) * c->bytes * c->b + (frac + fold / 2) * c->bytes * c->g;
}

const weft__algo weft__algo_all_reduce_rabenseifner = {
    .name = "rabenseifner", .coll = WEFT__COLL_ALL_REDUCE, .start = rb_start,
    .progress = rb_progress, .cost = rb_cost, .max_bytes = 1 << 20, .spaces = WEFT__MEM_KINDS_CPU};

/* reduce/binomial.c: binomial-tree reduce, for small messages.
 *
 * Virtual rank v: the rank's ring position XOR the root's when n is a power of two, else
 * the ring position minus the root's, mod n (patterns.h, weft__binomial_ring_vrank), as the
 * binomial broadcast's: each aligned block of ring positions is a subtree, so ranks that
 * share a host or a core reduce among themselves first and one message per level crosses.
 * In rank order, 4 ranks bound round-robin to 2 cores (ring 0 2 1 3) gave the root's core
 * 3 of the 4 receives; over the ring each core runs 2 (8-64 B reduce 0.17-0.19 us a call
 * against 0.19-0.22, 512 B-4 KiB 0.47-0.99 against 0.58-1.14, 3 alternating launches).
 * Rank v receives the partial result of each child v + m in turn, nearest first (m = 1, 2,
 * 4, ...), and reduces it on arrival into its accumulator as acc op child: the accumulator
 * covers v .. v+m-1 and the child v+m .. v+2m-1, so values combine in increasing
 * virtual-rank order (every weft op is commutative; a floating-point sum may round
 * differently from one in rank order). Then it sends the accumulator to its parent. The
 * accumulator is recvbuf on the root and scratch elsewhere (recvbuf may be NULL off the
 * root); a leaf sends its sendbuf. The root divides once for WEFT_AVG. Receives are one per round because they reduce into the same buffer.
 * Bytes each rank sends: count * size (all but the root). Latency term: ceil(log2 n) levels,
 * nchildren rounds on a path. Scratch: count * size on inner non-root ranks. Not pipelined:
 * the tuner keeps the chain for large messages. Sources: Thakur, Rabenseifner & Gropp 2005,
 * section 4.2 (binomial reduce for short messages); MPICH's MPIR_Reduce_intra_binomial. */
#include <string.h>
#include "algos/patterns.h"
#include "algos/rounds.h"
#include "lib/dtype.h"

typedef struct {
  weft__rounds rounds;
  int v, n, nchildren;
  size_t bytes;
  char *acc;
  weft__req req[1];
} rd_state;

static void rd_post(weft__task *t, int i) {
  rd_state *st = t->state;
  if (i < st->nchildren) {
    int child = st->v + (1 << i); /* round i: the i-th nearest child (i < nchildren) */
    weft__round_recv(&st->rounds, t, weft__binomial_ring_real(t->comm, child, t->root), st->acc,
                     i == 0 ? t->sendbuf : st->acc, st->bytes);
    return;
  }
  int parent = weft__binomial_parent(st->v);
  if (parent < 0) return;
  weft__round_send(&st->rounds, t, weft__binomial_ring_real(t->comm, parent, t->root),
                   st->nchildren > 0 ? st->acc : t->sendbuf, st->bytes);
}

static void rd_finish(weft__task *t, int i) {
  rd_state *st = t->state;
  if (i == st->nchildren && st->v == 0 && t->op == WEFT_AVG)
    weft__mem_avg(t->mem, t->recvbuf, t->count, t->dtype, st->n);
}

static weft_status_t rd_start(weft__task *t) {
  int n = t->comm->nranks;
  int v = weft__binomial_ring_vrank(t->comm, t->comm->rank, t->root);
  int nchildren = weft__binomial_nchildren(v, n);
  size_t bytes = t->count * weft__dtype_size(t->dtype);
  int scratch = v != 0 && nchildren > 0;
  size_t hdr = weft__align_up(sizeof(rd_state), 64);
  weft_status_t status;
  rd_state *st = weft__algo_state_take(t, hdr, scratch ? bytes : 0, &status); /* every field set below */
  if (st == NULL) return status;
  st->v = v;
  st->n = n;
  st->nchildren = nchildren;
  st->bytes = bytes;
  st->acc = v == 0 ? t->recvbuf : (char *)st + hdr;
  if (v == 0 && nchildren == 0 && bytes > 0 && t->sendbuf != t->recvbuf)
    weft__mem_copy(t->mem, t->recvbuf, t->sendbuf, bytes, 0); /* n == 1 */
  weft__rounds_init(&st->rounds, bytes > 0 ? nchildren + 1 : 0, st->req, 1, rd_post, rd_finish);
  weft__rounds_progress(&st->rounds, t);
  return WEFT_SUCCESS;
}

static weft_status_t rd_progress(weft__task *t) {
  rd_state *st = t->state;
  return weft__rounds_progress(&st->rounds, t);
}

static double rd_cost(const weft__cost_in *c) { return c->L * (c->a + c->bytes * (c->b + c->g)); }

const weft__algo weft__algo_reduce_binomial = {
    .name = "binomial", .coll = WEFT__COLL_REDUCE, .start = rd_start, .progress = rd_progress,
    .cost = rd_cost, .max_bytes = 1 << 20, .spaces = WEFT__MEM_KINDS_CPU};

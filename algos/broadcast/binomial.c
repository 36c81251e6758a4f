/* broadcast/binomial.c: binomial-tree broadcast, for small messages.
 *
 * Virtual rank v: the rank's ring position XOR the root's when n is a power of two, else
 * the rank's ring position minus the root's, mod n (patterns.h, weft__binomial_ring_vrank:
 * the tree over the communicator's ring order). Round 0: every rank but the root
 * receives the whole message from its parent (v with its lowest set bit cleared) into
 * recvbuf; the root copies sendbuf to recvbuf unless in-place. Round 1: it sends the message
 * to its children v + m, farthest (largest subtree) first. ceil(log2 n) levels.
 * Bytes each rank sends: nchildren * count * size (the root sends ceil(log2 n) copies).
 * Latency term: ceil(log2 n) alpha against n-1 for the chain; not pipelined, so the tuner
 * keeps the chain for large messages. Sources: Thakur, Rabenseifner & Gropp 2005, section 3
 * (binomial broadcast for short messages); MPICH's MPIR_Bcast_intra_binomial. */
#include <string.h>
#include "algos/patterns.h"
#include "algos/rounds.h"
#include "lib/dtype.h"

typedef struct {
  weft__rounds rounds;
  int v, n;
  size_t bytes;
  weft__req req[]; /* one receive, or one send per child */
} bc_state;

static void bc_post(weft__task *t, int i) {
  bc_state *st = t->state;
  if (i == 0) {
    if (st->v != 0)
      weft__round_recv(&st->rounds, t, weft__binomial_ring_real(t->comm, weft__binomial_parent(st->v), t->root),
                       t->recvbuf, NULL, st->bytes);
    return;
  }
  const void *src = st->v == 0 ? t->sendbuf : t->recvbuf;
  for (int m = weft__binomial_farthest(st->v, st->n); m >= 1; m /= 2) /* farthest subtree first */
    weft__round_send(&st->rounds, t, weft__binomial_ring_real(t->comm, st->v + m, t->root), src, st->bytes);
}

static weft_status_t bc_start(weft__task *t) {
  int n = t->comm->nranks;
  int v = weft__binomial_ring_vrank(t->comm, t->comm->rank, t->root);
  int nreq = weft__binomial_nchildren(v, n) + 1;
  weft_status_t status;
  /* not zeroed: every field is set below, each request when its round posts it */
  bc_state *st = weft__algo_state_take(t, sizeof(bc_state) + (size_t)nreq * sizeof(weft__req), 0, &status);
  if (st == NULL) return status;
  st->v = v;
  st->n = n;
  st->bytes = t->count * weft__dtype_size(t->dtype);
  if (v == 0 && t->sendbuf != t->recvbuf) weft__mem_copy(t->mem, t->recvbuf, t->sendbuf, st->bytes, 0);
  weft__rounds_init(&st->rounds, st->bytes > 0 ? 2 : 0, st->req, nreq, bc_post, NULL);
  weft__rounds_progress(&st->rounds, t);
  return WEFT_SUCCESS;
}

static weft_status_t bc_progress(weft__task *t) {
  bc_state *st = t->state;
  return weft__rounds_progress(&st->rounds, t);
}

static double bc_cost(const weft__cost_in *c) { return c->L * (c->a + c->bytes * c->b); }

const weft__algo weft__algo_broadcast_binomial = {
    .name = "binomial", .coll = WEFT__COLL_BROADCAST, .start = bc_start, .progress = bc_progress,
    .cost = bc_cost, .max_bytes = 1 << 20, .spaces = WEFT__MEM_KINDS_CPU};

/* all_reduce/ring.c: ring all-reduce = ring reduce-scatter, then ring all-gather, per slice.
 *
 * The count elements are split evenly into n blocks (block b belongs to the rank at ring
 * position b, the communicator's ring order, ring.h; r below is this rank's position); each block
 * is cut into pieces of at most chunk elements and slice k is the k-th piece of every block,
 * so a slice moves at most n * chunk elements. Per slice, 2(n-1) ring steps (ring.h):
 *   steps 0 .. n-2    reduce-scatter: receive block (r-s-2) and reduce it on arrival into
 *                     recvbuf with acc = this rank's sendbuf block (so in-place works);
 *                     step 0 sends from sendbuf, later steps forward the partial in recvbuf.
 *                     After it, block r of the slice is fully reduced; WEFT_AVG divides it
 *                     here, once, so every rank receives identical bits.
 *   steps n-1 .. 2n-3 all-gather: forward reduced blocks around the ring into recvbuf.
 * Bytes each rank sends: 2 (n-1)/n * count * size (bandwidth optimal).
 * Latency term: 2 (n-1) steps per slice, ceil(count / (n chunk)) slices.
 * Picked for every all-reduce today (the tuner comes later).
 * Sources: Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
 * workstations" (JPDC 2009); NCCL's ring all-reduce; Thakur, Rabenseifner & Gropp 2005. */
#include <string.h>
#include "algos/ring.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/task.h"

typedef struct {
  weft__ring_driver ring;
  weft__ring_layout layout;
  size_t esize;
  weft__req reqs[]; /* nsteps sends, then nsteps receives */
} ar_state;

static void ar_send_of(weft__task *t, size_t k, int s, const void **buf, size_t *bytes) {
  ar_state *st = t->state;
  int r = weft__comm_ring_pos(t->comm, t->comm->rank), n = t->comm->nranks;
  const char *base = s == 0 ? (const char *)t->sendbuf : (const char *)t->recvbuf;
  int b;
  if (s < n - 1) {
    b = weft__ring_rs_send_block(r, n, s);
  } else {
    b = weft__ring_ag_send_block(r, n, s - (n - 1));
  }
  size_t off, len = weft__ring_piece(&st->layout, b, k, &off);
  if (s == n - 1 && t->op == WEFT_AVG && len > 0) {
    weft__avg_finalize((char *)t->recvbuf + off * st->esize, len, t->dtype, n);
  }
  *buf = base + off * st->esize;
  *bytes = len * st->esize;
}

static void ar_recv_of(weft__task *t, size_t k, int s, void **dst, const void **acc,
                       size_t *bytes) {
  ar_state *st = t->state;
  int r = weft__comm_ring_pos(t->comm, t->comm->rank), n = t->comm->nranks;
  int rs = s < n - 1;
  int b = rs ? weft__ring_rs_recv_block(r, n, s) : weft__ring_ag_recv_block(r, n, s - (n - 1));
  size_t off, len = weft__ring_piece(&st->layout, b, k, &off);
  *dst = (char *)t->recvbuf + off * st->esize;
  *acc = rs ? (const char *)t->sendbuf + off * st->esize : NULL;
  *bytes = len * st->esize;
}

static const weft__ring_ops ar_ops = {ar_send_of, ar_recv_of, NULL, NULL, NULL};

static weft_status_t ar_start(weft__task *t) {
  int n = t->comm->nranks;
  int nsteps = 2 * (n - 1);
  size_t esize = weft__dtype_size(t->dtype);
  weft_status_t status;
  ar_state *st = weft__algo_state_alloc(t, sizeof(ar_state) + 2 * (size_t)nsteps * sizeof(weft__req),
                                        0, &status);
  if (st == NULL) return status;
  st->esize = esize;
  st->layout = weft__ring_layout_split(t->count, n, weft__chunk_elems(t->comm->chunk_bytes, esize));
  weft__ring_driver_init(&st->ring, t, &ar_ops, nsteps, weft__ring_nslices(&st->layout), st->reqs,
                         st->reqs + nsteps);
  if (n == 1 && t->count > 0) {
    if (t->sendbuf != t->recvbuf) memcpy(t->recvbuf, t->sendbuf, t->count * esize);
    if (t->op == WEFT_AVG) weft__avg_finalize(t->recvbuf, t->count, t->dtype, 1);
  }
  return WEFT_SUCCESS;
}

static weft_status_t ar_progress(weft__task *t) {
  ar_state *st = t->state;
  return weft__ring_driver_progress(&st->ring, t);
}

const weft__algo weft__algo_all_reduce_ring = {"ring", WEFT__COLL_ALL_REDUCE, ar_start, ar_progress};

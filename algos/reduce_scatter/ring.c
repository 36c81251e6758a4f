/* reduce_scatter/ring.c: ring reduce-scatter; rank r ends with block r (recvcount elements)
 * reduced over all ranks. sendbuf holds nranks blocks of recvcount elements.
 *
 * Slice k is the k-th piece (at most chunk elements) of every block. Per slice, n-1 ring
 * steps (ring.h) in the communicator's ring order, p this rank's position and block q the
 * block of the rank at position q: step s sends block (p-s-1) and receives block (p-s-2), reducing it on
 * arrival with this rank's sendbuf piece of that block. Step 0 sends straight from sendbuf;
 * intermediate partials land in two ping-pong scratch pieces (the receive of step s reuses
 * the piece that the send of step s-1 read, so it waits for that send); the last step reduces
 * straight into recvbuf with acc = sendbuf block r, which also covers in-place
 * (recvbuf == sendbuf + r * recvcount). WEFT_AVG divides each finished piece once.
 * Bytes each rank sends: (n-1) * recvcount * size. Latency term: n-1 steps per slice,
 * ceil(recvcount / chunk) slices. Scratch: 2 pieces of chunk elements (n > 2).
 * The tuner picks it but for small blocks.
 * Sources: Patarasuk & Yuan 2009 (the first half of their all-reduce); NCCL's ring
 * reduce-scatter; Thakur, Rabenseifner & Gropp 2005. */
#include <string.h>
#include "algos/ring.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/task.h"

typedef struct {
  weft__ring_driver ring;
  weft__ring_layout layout;
  size_t esize;
  char *scratch[2]; /* ping-pong pieces, inside this allocation */
  weft__req reqs[]; /* nsteps sends, nsteps receives, then the scratch */
} rs_state;

static void rs_send_of(weft__task *t, size_t k, int s, const void **buf, size_t *bytes) {
  rs_state *st = t->state;
  int p = weft__comm_ring_pos(t->comm, t->comm->rank), n = t->comm->nranks;
  int b = weft__comm_ring_rank(t->comm, weft__ring_rs_send_block(p, n, s));
  size_t off, len = weft__ring_piece(&st->layout, b, k, &off);
  *buf = s == 0 ? (const char *)t->sendbuf + off * st->esize : st->scratch[(s - 1) % 2];
  *bytes = len * st->esize;
}

static void rs_recv_of(weft__task *t, size_t k, int s, void **dst, const void **acc,
                       size_t *bytes) {
  rs_state *st = t->state;
  int r = t->comm->rank, n = t->comm->nranks, p = weft__comm_ring_pos(t->comm, r);
  int b = weft__comm_ring_rank(t->comm, weft__ring_rs_recv_block(p, n, s));
  size_t off, len = weft__ring_piece(&st->layout, b, k, &off);
  *acc = (const char *)t->sendbuf + off * st->esize;
  if (s == n - 2) { /* the block is r: its piece k lands in recvbuf */
    *dst = (char *)t->recvbuf + (off - weft__ring_block_offset(&st->layout, r)) * st->esize;
  } else {
    *dst = st->scratch[s % 2];
  }
  *bytes = len * st->esize;
}

/* Scratch piece s % 2 was last read by the send of step s-1. */
static int rs_recv_ready(weft__task *t, const weft__ring_driver *d, int s) {
  int n = t->comm->nranks;
  return s == n - 2 || s < 2 || d->done_send >= s;
}

static void rs_slice_done(weft__task *t, size_t k) {
  rs_state *st = t->state;
  if (t->op != WEFT_AVG) return;
  size_t off, len = weft__ring_piece(&st->layout, 0, k, &off);
  weft__mem_avg(t->mem, (char *)t->recvbuf + off * st->esize, len, t->dtype, t->comm->nranks);
}

static const weft__ring_ops rs_ops = {rs_send_of, rs_recv_of, rs_recv_ready, rs_slice_done, NULL};

static weft_status_t rs_start(weft__task *t) {
  int n = t->comm->nranks;
  int nsteps = n - 1;
  size_t esize = weft__dtype_size(t->dtype);
  size_t chunk = weft__chunk_elems(t->comm->chunk_bytes, esize);
  size_t piece = (chunk < t->count ? chunk : t->count) * esize;
  size_t hdr = weft__align_up(sizeof(rs_state) + 2 * (size_t)nsteps * sizeof(weft__req), 64);
  size_t extra = n > 2 ? 2 * weft__align_up(piece, 64) : 0;
  weft_status_t status;
  rs_state *st = weft__algo_state_take(t, hdr, extra, &status); /* every field set below */
  if (st == NULL) return status;
  st->esize = esize;
  st->layout = weft__ring_layout_equal(t->count, chunk);
  st->scratch[0] = (char *)st + hdr;
  st->scratch[1] = st->scratch[0] + weft__align_up(piece, 64);
  weft__ring_driver_init(&st->ring, t, &rs_ops, nsteps, weft__ring_nslices(&st->layout), st->reqs,
                         st->reqs + nsteps);
  if (n == 1 && t->sendbuf != t->recvbuf) weft__mem_copy(t->mem, t->recvbuf, t->sendbuf, t->count * esize, 0);
  return WEFT_SUCCESS;
}

static weft_status_t rs_progress(weft__task *t) {
  rs_state *st = t->state;
  return weft__ring_driver_progress(&st->ring, t);
}

static double rs_cost(const weft__cost_in *c) {
  return weft__cost_ceil_div(c->bytes, c->chunk) * (c->n - 1) * c->a + (c->n - 1) * c->bytes * (c->b + c->g);
}

const weft__algo weft__algo_reduce_scatter_ring = {
    .name = "ring", .coll = WEFT__COLL_REDUCE_SCATTER, .start = rs_start, .progress = rs_progress,
    .cost = rs_cost, .spaces = WEFT__MEM_KINDS_CPU};

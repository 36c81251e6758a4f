/* all_gather/ring.c: ring all-gather; recvbuf block p (sendcount elements) = rank p's sendbuf.
 *
 * Each rank's own input must reach block r of recvbuf (nothing to do in-place, when
 * sendbuf == recvbuf + r * sendcount): out of place, the step-0 send reads it from sendbuf
 * and the copy into block r rides along (weft__req.copy_to), so sendbuf is read from memory
 * once; with overlapping buffers or one rank, a memmove first. Slice k is the k-th piece (at most chunk elements) of
 * every block; per slice, n-1 ring steps (ring.h) in the communicator's ring order, p this
 * rank's position and block q the block of the rank at position q: step s sends block
 * (p-s) and receives block (p-s-1), both in recvbuf, so the block received at step s is forwarded at step s+1.
 * Bytes each rank sends: (n-1) * sendcount * size. Latency term: n-1 steps per slice,
 * ceil(sendcount / chunk) slices. No scratch. The tuner picks it for large blocks.
 * Sources: Thakur, Rabenseifner & Gropp, "Optimization of collective communication
 * operations in MPICH" (IJHPCA 2005), ring all-gather; NCCL's ring all-gather. */
#include <string.h>
#include "algos/ring.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/task.h"

typedef struct {
  weft__ring_driver ring;
  weft__ring_layout layout;
  size_t esize;
  int fused_own; /* step 0 sends from sendbuf and copies to the own block as it goes */
  weft__req reqs[]; /* nsteps sends, then nsteps receives */
} ag_state;

static void ag_send_of(weft__task *t, size_t k, int s, const void **buf, size_t *bytes) {
  ag_state *st = t->state;
  int p = weft__comm_ring_pos(t->comm, t->comm->rank);
  int b = weft__comm_ring_rank(t->comm, weft__ring_ag_send_block(p, t->comm->nranks, s));
  size_t off, len = weft__ring_piece(&st->layout, b, k, &off);
  *buf = (const char *)t->recvbuf + off * st->esize;
  if (s == 0 && st->fused_own) /* the own block, still only in sendbuf */
    *buf = (const char *)t->sendbuf + (off - (size_t)t->comm->rank * t->count) * st->esize;
  *bytes = len * st->esize;
}

static void *ag_send_copy_to(weft__task *t, size_t k, int s) {
  ag_state *st = t->state;
  if (s != 0 || !st->fused_own) return NULL;
  size_t off;
  weft__ring_piece(&st->layout, t->comm->rank, k, &off);
  return (char *)t->recvbuf + off * st->esize;
}

static void ag_recv_of(weft__task *t, size_t k, int s, void **dst, const void **acc,
                       size_t *bytes) {
  ag_state *st = t->state;
  int p = weft__comm_ring_pos(t->comm, t->comm->rank);
  int b = weft__comm_ring_rank(t->comm, weft__ring_ag_recv_block(p, t->comm->nranks, s));
  size_t off, len = weft__ring_piece(&st->layout, b, k, &off);
  *dst = (char *)t->recvbuf + off * st->esize;
  *acc = NULL;
  *bytes = len * st->esize;
}

static const weft__ring_ops ag_ops = {ag_send_of, ag_recv_of, NULL, NULL, ag_send_copy_to};

static weft_status_t ag_start(weft__task *t) {
  int r = t->comm->rank, n = t->comm->nranks;
  int nsteps = n - 1;
  size_t esize = weft__dtype_size(t->dtype);
  weft_status_t status;
  /* not zeroed: every field is set below, each request when posted (lib/algo.h) */
  ag_state *st = weft__algo_state_take(t, sizeof(ag_state) + 2 * (size_t)nsteps * sizeof(weft__req), 0, &status);
  if (st == NULL) return status;
  st->fused_own = 0;
  st->esize = esize;
  st->layout = weft__ring_layout_equal(t->count, weft__chunk_elems(t->comm->chunk_bytes, esize));
  weft__ring_driver_init(&st->ring, t, &ag_ops, nsteps, weft__ring_nslices(&st->layout), st->reqs,
                         st->reqs + nsteps);
  if (t->count == 0) return WEFT_SUCCESS;
  /* large: the last step's pieces and the own block go past the cache (nothing reads them).
   * Large counts the outputs of the host's ranks together, as the all-to-alls do: they share
   * the L3. On the Zen 3 VM (one 32 MiB L3, 5 alternating launches) a 2-rank 8 MiB all-gather
   * out of place took 1194-1570 us a call through the cache, 924-1036 us past it; 4 ranks on
   * 2 cores at 8 MiB (3 launches) 3489-3692 us against 2901-2957. */
  st->ring.nt = weft__host_nt_output(t->comm, (size_t)n * t->count * esize);
  char *own = (char *)t->recvbuf + (size_t)r * t->count * esize;
  size_t bytes = t->count * esize;
  if ((const void *)own == t->sendbuf) return WEFT_SUCCESS;
  const char *s = t->sendbuf;
  /* Out of place with disjoint buffers and a peer: the own block is copied as its step-0
   * send reads it (weft__req.copy_to), from cache, instead of reading sendbuf from memory
   * twice: 2 ranks move 1.5 S of DRAM traffic per rank instead of 2 S. */
  if (n > 1 && (s + bytes <= own || own + bytes <= s)) {
    st->fused_own = 1;
    return WEFT_SUCCESS;
  }
  weft__mem_copy(t->mem, own, s, bytes, WEFT__MEM_OVERLAP);
  return WEFT_SUCCESS;
}

static weft_status_t ag_progress(weft__task *t) {
  ag_state *st = t->state;
  return weft__ring_driver_progress(&st->ring, t);
}

/* The ring driver's fixed cost per call, in alphas: on 2 ranks, where the ring and Bruck
 * both take one step, the ring all-gather measured 0.31-0.38 us against Bruck's 0.22-0.35 us
 * at 8-512 B (bound, 20,000 calls, in and out of place) and tied at 2 KiB; 0.13 alpha puts the
 * model's crossover there (4 B beta = 0.13 alpha). */
#define RING_CALL_ALPHAS 0.13
static double ag_cost(const weft__cost_in *c) {
  return RING_CALL_ALPHAS * c->a + weft__cost_ceil_div(c->bytes, c->chunk) * (c->n - 1) * c->a +
         (c->n - 1) * c->bytes * c->b;
}

const weft__algo weft__algo_all_gather_ring = {
    .name = "ring", .coll = WEFT__COLL_ALL_GATHER, .start = ag_start, .progress = ag_progress,
    .cost = ag_cost, .spaces = WEFT__MEM_KINDS_CPU};

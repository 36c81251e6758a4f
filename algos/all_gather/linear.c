/* all_gather/linear.c: linear (pairwise-exchange) all-gather; recvbuf block p (sendcount
 * elements) = rank p's sendbuf.
 *
 * At step s = 1 .. n-1 rank r sends its block to rank (r+s) and receives block (r-s) from
 * rank (r-s) (mod n), the steps of the pairwise all-to-all (all_to_all/pairwise.c) with one
 * send block for every peer; out of place it copies its block into block r of recvbuf once
 * the steps are posted. At most WEFT_A2A_THROTTLE steps are in flight (algos/exchange.h,
 * the driver both share); each peer gets exactly one message. The sends read sendbuf, or, in place (or with
 * buffers that overlap), block r of recvbuf, which no receive writes: no scratch.
 * Bytes each rank sends: (n-1) * sendcount * size, as the ring; latency term n-1 steps,
 * overlapped. Why, beside the ring: no block waits for another rank to forward it, so with
 * more ranks than cores no step waits for a rank that is not running; where the transport
 * moves a large message once, the receiver reading the sender's buffer (shm's single copy),
 * the ring forwards each block n-1 times through ranks that must run in turn.
 * Sources: UCC's "linear" all-gather (each rank sends to and receives from every other);
 * Thakur, Rabenseifner & Gropp 2005 for the pairwise order. */
#include <math.h>
#include <string.h>
#include "algos/ring.h"
#include "algos/exchange.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/task.h"
#include "transports/transport.h"

typedef struct {
  weft__exchange x;
  int nt;           /* received blocks are written past the cache (weft__host_nt_output) */
  const char *own;  /* the block every send reads: sendbuf, or block r of recvbuf */
  weft__req reqs[]; /* send and receive of steps 1..n-1 */
} lag_state;

/* Posts step s (1 .. n-1): send the own block to rank r+s, receive block (r-s) from rank r-s. */
static void post_step(weft__task *t, int s) {
  lag_state *st = t->state;
  size_t block = t->count * weft__dtype_size(t->dtype);
  int from = weft__ring_mod((long long)t->comm->rank - s, t->comm->nranks);
  weft__exchange_post_step(&st->x, t, s, st->own, block, 0, (char *)t->recvbuf + (size_t)from * block, block, st->nt);
}

static weft_status_t lag_start(weft__task *t) {
  struct weft_comm *comm = t->comm;
  int r = comm->rank, n = comm->nranks;
  size_t block = t->count * weft__dtype_size(t->dtype);
  size_t hdr = sizeof(lag_state) + 2 * (size_t)(n - 1) * sizeof(weft__req);
  weft_status_t status;
  /* not zeroed: every field is set below, each request when its step posts it */
  lag_state *st = weft__algo_state_take(t, hdr, 0, &status);
  if (st == NULL) return status;
  if (block == 0) { /* nothing moves on any rank */
    weft__exchange_start(&st->x, t, 0, st->reqs, post_step);
    return WEFT_SUCCESS;
  }
  char *own = (char *)t->recvbuf + (size_t)r * block;
  const char *in = t->sendbuf;
  st->nt = weft__host_nt_output(comm, (size_t)n * block);
  /* Sends read sendbuf when it lies outside recvbuf, so the own block's copy waits for
   * nothing and nothing waits for it: it runs after the steps are posted. Overlapping
   * buffers (but exact in-place) are moved into place first, and sends read from there. */
  int disjoint = in + block <= (const char *)t->recvbuf || (const char *)t->recvbuf + (size_t)n * block <= in;
  if (!disjoint && in != own) weft__mem_copy(t->mem, own, in, block, WEFT__MEM_OVERLAP);
  st->own = disjoint ? in : own;
  weft__exchange_start(&st->x, t, n - 1, st->reqs, post_step);
  if (disjoint) {
    unsigned nt = weft__mem_nt_flag(block, st->nt);
    weft__mem_copy(t->mem, own, in, block, nt);
    weft__mem_publish(t->mem, nt);
  }
  return WEFT_SUCCESS;
}

static weft_status_t lag_progress(weft__task *t) {
  lag_state *st = t->state;
  return weft__exchange_progress(&st->x, t);
}

/* Only with more ranks than cores (INFINITY otherwise), where it was measured: there its
 * exchanges complete in whatever order the ranks run, so they cost one step, as the pairwise
 * all-to-all's do. 4 ranks on 2 cores (bound, all_gather_perf -z 2, 3 alternating launches,
 * us per call out of place / in place): 64 KiB 13.6/10.0 against Bruck's 11.8/10.1, 1 MiB
 * 145/119 against the ring's 183/159, 4 MiB 768-831/622-703 against 923-948/872-1021,
 * 16 MiB 3396-3569/2807-2984 against 4357-4444/4087-4330, 32-128 MiB within 6% either way.
 * With a core per rank the ring stays: on 2 ranks, 4-64 MiB out of place, it copies the own
 * block as its send reads it (ring.c) and ran 1.1-1.3x faster. The row needs WAIT, the mark
 * of a transport whose ranks wait on memory (shm): over sockets, 4 ranks on 2 cores, each
 * message costs system calls on both sides, and Bruck ran 4-32 KiB 1.2-1.3x and the ring
 * 2 MiB 1.3x faster than it. */
static double lag_cost(const weft__cost_in *c) {
  if (!c->oversub) return INFINITY;
  return c->a + (c->n - 1) * c->bytes * c->b;
}

const weft__algo weft__algo_all_gather_linear = {
    .name = "linear", .coll = WEFT__COLL_ALL_GATHER, .start = lag_start,
    .progress = lag_progress, .cost = lag_cost, .spaces = WEFT__MEM_KINDS_CPU,
    .needs = WEFT__TRANSPORT_CAP_WAIT};

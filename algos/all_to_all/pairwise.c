/* all_to_all/pairwise.c: pairwise-exchange all-to-all; recvbuf block p = rank p's sendbuf
 * block r (count elements per block).
 *
 * Rank r copies its own block locally; at step s = 1 .. n-1 it sends sendbuf block (r+s)
 * to rank (r+s) and receives recvbuf block (r-s) from rank (r-s) (mod n), so at every step
 * each rank sends to one peer and receives from another and no two ranks aim at the same
 * receiver. At most WEFT_A2A_THROTTLE steps are in flight (algos/exchange.h: step s is posted
 * once steps 1 .. s-W completed); each peer gets exactly one message, so per-peer FIFO
 * order is trivially the same on both sides. In-place (sendbuf == recvbuf) stages a copy of
 * sendbuf in the communicator's kept scratch (weft__comm_scratch: no allocation per call).
 * Bytes each rank sends: (n-1) * count * size. Latency term: n-1 steps (overlapped).
 * Scratch: n * count * size in-place (our own block's part left unwritten), else none.
 * Staging only the blocks that leave measured, in-place, 5 alternating launches: 2 ranks
 * 64K 6.94 -> 5.93 us, 1M 166 -> 114, 4M 692 -> 492; 4 ranks on 2 cores 1M 406 -> 314,
 * 4M 1715 -> 1562. Received blocks and the own block are written past the cache once the
 * outputs of all the host's ranks add up to half the L3 (weft__host_nt_output: they share
 * it), not only once one block does: 4 ranks on 2 cores (Zen 3 VM, alltoall_perf -z 2, 4
 * alternating launch pairs, old/new per pair) 4-32 MiB 1.14-1.38x faster (3-4 of 4 pairs
 * each; 1-2 MiB and 64 MiB, unchanged or already past, 0.99-1.05x), 2 ranks 8 MiB 1.11x
 * and 16 MiB 1.33x (4 of 4). The tuner picks it but for
 * small blocks (Bruck), and always with more ranks than cores.
 * Sources: Thakur, Rabenseifner & Gropp 2005 (pairwise exchange for long messages);
 * NCCL's all-to-all as grouped send/recv. */
#include <string.h>
#include "algos/ring.h"
#include "algos/exchange.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/task.h"

typedef struct {
  weft__exchange x;
  int nt;           /* received blocks are written past the cache (weft__host_nt_output) */
  const char *src;  /* sendbuf, or its staged copy in-place */
  weft__req reqs[]; /* send and receive of steps 1..n-1 */
} a2a_state;

/* Posts step s (1 .. n-1): send block (r+s) to rank r+s, receive block (r-s) from it. */
static void post_step(weft__task *t, int s) {
  a2a_state *st = t->state;
  size_t block = t->count * weft__dtype_size(t->dtype);
  int r = t->comm->rank, n = t->comm->nranks;
  int to = weft__ring_mod((long long)r + s, n), from = weft__ring_mod((long long)r - s, n);
  weft__exchange_post_step(&st->x, t, s, st->src + (size_t)to * block, block, st->src != t->sendbuf,
                           (char *)t->recvbuf + (size_t)from * block, block, st->nt);
}

static weft_status_t a2a_start(weft__task *t) {
  struct weft_comm *comm = t->comm;
  int r = comm->rank, n = comm->nranks;
  size_t block = t->count * weft__dtype_size(t->dtype);
  int in_place = t->sendbuf == t->recvbuf && block > 0;
  size_t hdr = weft__align_up(sizeof(a2a_state) + 2 * (size_t)(n - 1) * sizeof(weft__req), 64);
  weft_status_t status;
  a2a_state *st = weft__algo_state_alloc(t, hdr, 0, &status);
  if (st == NULL) return status;
  if (block == 0) { /* nothing moves on any rank */
    weft__exchange_start(&st->x, t, 0, st->reqs, post_step);
    return WEFT_SUCCESS;
  }
  st->src = t->sendbuf;
  st->nt = weft__host_nt_output(comm, (size_t)n * block);
  if (in_place) {
    char *staged = weft__comm_scratch(t, (size_t)n * block, &status);
    if (staged == NULL) return status;
    /* Every block but our own, which never leaves (it is already in place): at the same
     * offsets, so a send's source is st->src + to * block either way. */
    size_t own = (size_t)r * block, rest = (size_t)(n - 1 - r) * block;
    if (own > 0) weft__mem_copy(t->mem, staged, t->sendbuf, own, 0);
    if (rest > 0) weft__mem_copy(t->mem, staged + own + block, (const char *)t->sendbuf + own + block, rest, 0);
    st->src = staged;
  } else {
    /* The self block, like a received one. */
    unsigned nt = weft__mem_nt_flag(block, st->nt);
    weft__mem_copy(t->mem, (char *)t->recvbuf + (size_t)r * block, st->src + (size_t)r * block, block, nt);
    weft__mem_publish(t->mem, nt);
  }
  weft__exchange_start(&st->x, t, n - 1, st->reqs, post_step);
  return WEFT_SUCCESS;
}

static weft_status_t a2a_progress(weft__task *t) {
  a2a_state *st = t->state;
  return weft__exchange_progress(&st->x, t);
}

static double a2a_cost(const weft__cost_in *c) {
  /* Every message is posted at once, but each peer's is a step of its own to schedule ...
   * except when ranks outnumber cores: then each of Bruck's dependent steps waits for the
   * next rank to be scheduled, while the pairwise exchanges complete in whatever order the
   * ranks run, so they cost one step. Measured with 3 and 4 ranks on the 2 cores, 16 B-8 KiB
   * (2,000 calls, 2 launches): pairwise 2.7-3.3 us against Bruck's 3.9-5.1 us (3 ranks) and
   * 4.8-7.0 against 6.1-12.7 us (4 ranks). */
  double steps = c->oversub ? 1 : c->n - 1;
  return steps * c->a + (c->n - 1) * c->bytes * c->b;
}

const weft__algo weft__algo_all_to_all_pairwise = {
    .name = "pairwise", .coll = WEFT__COLL_ALL_TO_ALL, .start = a2a_start,
    .progress = a2a_progress, .cost = a2a_cost, .spaces = WEFT__MEM_KINDS_CPU};

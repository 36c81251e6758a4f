/* all_to_allv/pairwise.c: pairwise-exchange all-to-all with per-peer counts and
 * displacements; rank p's block for us (its sendcounts[r] elements at its sdispls[r]) lands
 * at recvbuf + rdispls[p] (recvcounts[p] elements).
 *
 * The schedule of all_to_all/pairwise.c: rank r copies its own block locally; at step
 * s = 1 .. n-1 it sends its block for rank (r+s) and receives the block of rank (r-s)
 * (mod n), so no two ranks aim at the same receiver in one step. At most WEFT_A2A_THROTTLE
 * steps are in flight (algos/exchange.h); each peer gets exactly one message, so per-peer
 * FIFO matching is trivially right.
 * Unlike all_to_all, empty blocks are sent as real 0-byte messages: counts differ per peer,
 * so only the transport's size check catches a recvcounts[p] that disagrees with what p
 * sends (the receiver's error names both sizes); for the self block the check is local.
 * The cost is 2 (n-1) empty messages per call, small next to the latency term anyway.
 * Bytes each rank sends: sum over p != r of sendcounts[p] * size. Latency term: n-1 steps
 * (overlapped). Scratch: none (not in-place: the entry point rejects overlapping extents).
 * Received blocks and the own block bypass the cache by all_to_all's rule (the sum of
 * recvcounts, weft__host_nt_output). 4 ranks on 2 cores, a timing program (median of 30
 * calls, 4 alternating launch pairs): 2-16 MiB 1.12-1.16x faster (3-4 of 4) with the same
 * buffers at every size, as the perf tools keep them; 32 MiB 0.94x (1 of 4); with fresh
 * buffers per size 0.92-1.06x at 1-64 MiB (1-2 of 4: no effect beyond the noise).
 * The only all-to-allv.
 * Sources: Thakur, Rabenseifner & Gropp 2005 (pairwise exchange); MPI_Alltoallv's
 * semantics; NCCL's all-to-allv as grouped send/recv. */
#include <stdint.h>
#include <string.h>
#include "algos/ring.h"
#include "algos/exchange.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/status.h"
#include "lib/task.h"

typedef struct {
  weft__exchange x;
  int nt;           /* received blocks are written past the cache (weft__host_nt_output) */
  weft__req reqs[]; /* send and receive of steps 1..n-1 */
} a2av_state;

/* The self block: copied locally after checking that both counts agree. */
static weft_status_t copy_self(weft__task *t, size_t esize, int nt) {
  int r = t->comm->rank;
  size_t sc = WEFT__V_SENDCOUNTS(t)[r], rc = WEFT__V_RECVCOUNTS(t)[r];
  if (sc != rc) {
    return weft__error(t->comm, WEFT_ERR_INVALID_USAGE,
                       "rank %d: all_to_allv: recv from self (peer %d): message size mismatch: "
                       "sendcounts[%d] is %zu bytes, recvcounts[%d] expects %zu",
                       r, r, r, sc * esize, r, rc * esize);
  }
  if (sc == 0) return WEFT_SUCCESS;
  weft__mem_copy(t->mem, (char *)t->recvbuf + WEFT__V_RDISPLS(t)[r] * esize,
                 (const char *)t->sendbuf + WEFT__V_SDISPLS(t)[r] * esize, sc * esize,
                 weft__mem_nt_flag(sc * esize, nt));
  return WEFT_SUCCESS;
}

/* Posts step s (1 .. n-1): our block for rank r+s, and rank r-s's block for us. */
static void post_step(weft__task *t, int s) {
  a2av_state *st = t->state;
  size_t esize = weft__dtype_size(t->dtype);
  int r = t->comm->rank, n = t->comm->nranks;
  int to = weft__ring_mod((long long)r + s, n), from = weft__ring_mod((long long)r - s, n);
  const char *src = t->sendbuf;
  char *dst = t->recvbuf;
  size_t sbytes = WEFT__V_SENDCOUNTS(t)[to] * esize, rbytes = WEFT__V_RECVCOUNTS(t)[from] * esize;
  /* A NULL buffer is allowed when nothing is sent or received; never offset it. */
  weft__exchange_post_step(&st->x, t, s, sbytes ? src + WEFT__V_SDISPLS(t)[to] * esize : src, sbytes, 0,
                           rbytes ? dst + WEFT__V_RDISPLS(t)[from] * esize : dst, rbytes, st->nt);
}

static weft_status_t a2av_start(weft__task *t) {
  int n = t->comm->nranks;
  weft_status_t status;
  a2av_state *st = weft__algo_state_alloc(
      t, sizeof(a2av_state) + 2 * (size_t)(n - 1) * sizeof(weft__req), 0, &status);
  if (st == NULL) return status;
  size_t esize = weft__dtype_size(t->dtype), out = 0;
  for (int p = 0; p < n; p++) { /* each block fits recvbuf (checked); their sum saturates */
    size_t b = WEFT__V_RECVCOUNTS(t)[p] * esize;
    out = b > SIZE_MAX - out ? SIZE_MAX : out + b;
  }
  st->nt = weft__host_nt_output(t->comm, out);
  WEFT_TRY(copy_self(t, esize, st->nt));
  weft__exchange_start(&st->x, t, n - 1, st->reqs, post_step);
  return WEFT_SUCCESS;
}

static weft_status_t a2av_progress(weft__task *t) {
  a2av_state *st = t->state;
  return weft__exchange_progress(&st->x, t);
}

const weft__algo weft__algo_all_to_allv_pairwise = {
    .name = "pairwise", .coll = WEFT__COLL_ALL_TO_ALLV, .start = a2av_start,
    .progress = a2av_progress, .spaces = WEFT__MEM_KINDS_CPU};

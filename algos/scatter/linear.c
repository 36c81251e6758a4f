/* scatter/linear.c: linear scatter; every rank's recvbuf = root's sendbuf block rank
 * (count elements).
 *
 * The root posts its n-1 sends at once, each straight from its block of sendbuf, and
 * copies its own block (not in-place, when recvbuf == sendbuf + root * count) once the
 * sends are on their way, so the peers read them meanwhile; every other
 * rank receives one message from the root into recvbuf. Requests stream through the
 * transports in pieces, so no scratch is needed however large the blocks. An empty block
 * (count 0, the same on every rank) moves nothing on any rank.
 * Bytes: the root sends (n-1) * count * size, each other rank receives count * size; the
 * root's link bounds the time: (n-1) beta count size. Latency term: 1 step (the n-1
 * messages overlap). Scratch: none. The only scatter; a binomial tree
 * (log2 n steps) would win for small messages on many ranks.
 * Sources: MPI_Scatter's semantics; Open MPI coll/base "linear" scatter; NCCL's scatter as
 * grouped send/recv. */
#include <string.h>
#include "algos/ring.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/task.h"

typedef struct {
  int nreq, done;   /* done: a completed prefix of reqs */
  /* root, out of place, blocks of at least WEFT__PUT_MIN_BYTES (smaller ones go through
   * the FIFOs, and are copied at once): its own block, copied by the first progress call,
   * which comes after the transports' first pass has handed the sends to the peers
   * (lib/task.c), so they read while the root copies (weft__req.busy_sender); own_bytes 0
   * once copied */
  const char *own_src;
  char *own_dst;
  size_t own_bytes;
  weft__req reqs[]; /* root: n-1 sends; others: one receive */
} scatter_state;

static void root_start(weft__task *t, scatter_state *st, size_t block) {
  struct weft_comm *comm = t->comm;
  const char *src = t->sendbuf;
  const char *own = src + (size_t)comm->rank * block;
  if ((const char *)t->recvbuf != own) {
    if (block < WEFT__PUT_MIN_BYTES) weft__mem_copy(t->mem, t->recvbuf, own, block, 0);
    else st->own_src = own, st->own_dst = t->recvbuf, st->own_bytes = block;
  }
  for (int p = 0; p < comm->nranks; p++) {
    if (p == comm->rank) continue;
    weft__req *snd = &st->reqs[st->nreq++];
    weft__req_init_send(snd, t->mem, src + (size_t)p * block, block);
    snd->busy_sender = st->own_bytes > 0;
    weft__req_post(weft__comm_conn(comm, p), snd);
  }
}

static weft_status_t scatter_start(weft__task *t) {
  struct weft_comm *comm = t->comm;
  size_t block = t->count * weft__dtype_size(t->dtype);
  int is_root = comm->rank == t->root;
  size_t nreq = is_root ? (size_t)(comm->nranks - 1) : 1;
  weft_status_t status;
  scatter_state *st = weft__algo_state_alloc(t, sizeof(scatter_state) + nreq * sizeof(weft__req), 0, &status);
  if (st == NULL) return status;
  if (block == 0) return WEFT_SUCCESS;
  if (is_root) {
    root_start(t, st, block);
    return WEFT_SUCCESS;
  }
  weft__req_init_recv(&st->reqs[0], t->mem, t->recvbuf, NULL, block, t->dtype, WEFT_SUM);
  weft__req_post(weft__comm_conn(comm, t->root), &st->reqs[0]);
  st->nreq = 1;
  return WEFT_SUCCESS;
}

static weft_status_t scatter_progress(weft__task *t) {
  scatter_state *st = t->state;
  if (st->own_bytes > 0) {
    weft__mem_copy(t->mem, st->own_dst, st->own_src, st->own_bytes, 0);
    st->own_bytes = 0;
  }
  while (st->done < st->nreq && st->reqs[st->done].complete) st->done++;
  return st->done == st->nreq ? WEFT_SUCCESS : WEFT_IN_PROGRESS;
}

const weft__algo weft__algo_scatter_linear = {
    .name = "linear", .coll = WEFT__COLL_SCATTER, .start = scatter_start, .progress = scatter_progress, .spaces = WEFT__MEM_KINDS_CPU};

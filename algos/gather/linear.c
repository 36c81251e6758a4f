/* gather/linear.c: linear gather; root's recvbuf block p = rank p's sendbuf (count elements).
 *
 * Every non-root rank sends its block to the root in one message; the root posts the n-1
 * receives at once, straight into their blocks of recvbuf, and copies its own block (not
 * in-place, when sendbuf == recvbuf + root * count). Requests stream through the
 * transports in pieces, so no scratch is needed however large the blocks. An empty block
 * (count 0, the same on every rank) moves nothing on any rank.
 * Bytes: each non-root sends count * size; the root receives (n-1) * count * size, which
 * bounds the time by the root's link: (n-1) beta count size. Latency term: 1 step (the n-1
 * messages overlap at the root). Scratch: none. The only gather; a binomial
 * tree (log2 n steps) would win for small messages on many ranks.
 * Sources: MPI_Gather's semantics; Open MPI coll/base "linear" gather; NCCL's gather as
 * grouped send/recv. */
#include <string.h>
#include "algos/ring.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/task.h"

typedef struct {
  int nreq, done;   /* done: a completed prefix of reqs */
  weft__req reqs[]; /* root: n-1 receives; others: one send */
} gather_state;

static void root_start(weft__task *t, gather_state *st, size_t block) {
  struct weft_comm *comm = t->comm;
  char *dst = t->recvbuf;
  const char *own = dst + (size_t)comm->rank * block;
  if ((const char *)t->sendbuf != own) weft__mem_copy(t->mem, dst + (size_t)comm->rank * block, t->sendbuf, block, 0);
  for (int p = 0; p < comm->nranks; p++) {
    if (p == comm->rank) continue;
    weft__req *rcv = &st->reqs[st->nreq++];
    weft__req_init_recv(rcv, t->mem, dst + (size_t)p * block, NULL, block, t->dtype, WEFT_SUM);
    weft__req_post(weft__comm_conn(comm, p), rcv);
  }
}

static weft_status_t gather_start(weft__task *t) {
  struct weft_comm *comm = t->comm;
  size_t block = t->count * weft__dtype_size(t->dtype);
  int is_root = comm->rank == t->root;
  size_t nreq = is_root ? (size_t)(comm->nranks - 1) : 1;
  weft_status_t status;
  gather_state *st = weft__algo_state_alloc(t, sizeof(gather_state) + nreq * sizeof(weft__req), 0, &status);
  if (st == NULL) return status;
  if (block == 0) return WEFT_SUCCESS;
  if (is_root) {
    root_start(t, st, block);
    return WEFT_SUCCESS;
  }
  weft__req_init_send(&st->reqs[0], t->mem, t->sendbuf, block);
  weft__req_post(weft__comm_conn(comm, t->root), &st->reqs[0]);
  st->nreq = 1;
  return WEFT_SUCCESS;
}

static weft_status_t gather_progress(weft__task *t) {
  gather_state *st = t->state;
  while (st->done < st->nreq && st->reqs[st->done].complete) st->done++;
  return st->done == st->nreq ? WEFT_SUCCESS : WEFT_IN_PROGRESS;
}

const weft__algo weft__algo_gather_linear = {
    .name = "linear", .coll = WEFT__COLL_GATHER, .start = gather_start, .progress = gather_progress, .spaces = WEFT__MEM_KINDS_CPU};

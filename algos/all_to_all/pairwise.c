/* all_to_all/pairwise.c: pairwise-exchange all-to-all; recvbuf block p = rank p's sendbuf
 * block r (count elements per block).
 *
 * Rank r copies its own block locally; at step s = 1 .. n-1 it sends sendbuf block (r+s)
 * to rank (r+s) and receives recvbuf block (r-s) from rank (r-s) (mod n), so at every step
 * each rank sends to one peer and receives from another and no two ranks aim at the same
 * receiver. All steps are posted at once today (window n-1; a bounded window comes later);
 * each peer gets exactly one message, so per-peer FIFO order is trivially the same on both
 * sides. In-place (sendbuf == recvbuf) stages a copy of sendbuf in the state allocation.
 * Bytes each rank sends: (n-1) * count * size. Latency term: n-1 steps (overlapped).
 * Scratch: n * count * size in-place, else none. Picked for every all-to-all today.
 * Sources: Thakur, Rabenseifner & Gropp 2005 (pairwise exchange for long messages);
 * NCCL's all-to-all as grouped send/recv. */
#include <string.h>
#include "algos/ring.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/task.h"

typedef struct {
  int nreq, done; /* done: a completed prefix of reqs */
  weft__req reqs[]; /* send and receive of steps 1..n-1, then the staged copy in-place */
} a2a_state;

static weft_status_t a2a_start(weft__task *t) {
  struct weft_comm *comm = t->comm;
  int r = comm->rank, n = comm->nranks;
  size_t block = t->count * weft__dtype_size(t->dtype);
  int in_place = t->sendbuf == t->recvbuf && block > 0;
  size_t hdr = weft__align_up(sizeof(a2a_state) + 2 * (size_t)(n - 1) * sizeof(weft__req), 64);
  weft_status_t status;
  a2a_state *st = weft__algo_state_alloc(t, hdr, in_place ? (size_t)n * block : 0, &status);
  if (st == NULL) return status;
  if (block == 0) return WEFT_SUCCESS; /* nreq = 0: nothing moves on any rank */
  const char *src = t->sendbuf;
  if (in_place) {
    memcpy((char *)st + hdr, t->sendbuf, (size_t)n * block);
    src = (const char *)st + hdr;
  } else {
    memcpy((char *)t->recvbuf + (size_t)r * block, src + (size_t)r * block, block);
  }
  for (int s = 1; s < n; s++) {
    int to = weft__ring_mod((long long)r + s, n), from = weft__ring_mod((long long)r - s, n);
    weft__req *snd = &st->reqs[2 * (s - 1)], *rcv = &st->reqs[2 * (s - 1) + 1];
    weft__req_init_send(snd, src + (size_t)to * block, block);
    weft__req_init_recv(rcv, (char *)t->recvbuf + (size_t)from * block, NULL, block, t->dtype,
                        WEFT_SUM);
    weft__req_post(weft__comm_conn(comm, to), snd);
    weft__req_post(weft__comm_conn(comm, from), rcv);
  }
  st->nreq = 2 * (n - 1);
  return WEFT_SUCCESS;
}

static weft_status_t a2a_progress(weft__task *t) {
  a2a_state *st = t->state;
  while (st->done < st->nreq && st->reqs[st->done].complete) st->done++;
  return st->done == st->nreq ? WEFT_SUCCESS : WEFT_IN_PROGRESS;
}

const weft__algo weft__algo_all_to_all_pairwise = {"pairwise", WEFT__COLL_ALL_TO_ALL, a2a_start,
                                                   a2a_progress};

/* barrier/dissemination.c: the dissemination barrier (Hensgen, Finkel & Manber 1988).
 *
 * ceil(log2 n) rounds; in round k rank r sends an empty message to (r + 2^k) mod n and
 * receives one from (r - 2^k) mod n, and it sends round k's message only after round k-1's
 * has arrived. By induction, after round k rank r has (transitively) heard from the 2^(k+1)
 * ranks r, r-1, ..., r-2^(k+1)+1, so after the last round from all n: no rank leaves before
 * every rank has entered. Unlike a butterfly it needs no power-of-two rank count.
 * All receives are posted at start (they land nowhere, so they need not wait); when n is
 * not a power of two one peer may appear in several rounds, and per-peer FIFO matching then
 * pairs round k with round k on both sides because both post in round order.
 * Bytes: none (ceil(log2 n) empty messages sent per rank). Latency term: ceil(log2 n) alpha.
 * Picked for every barrier. */
#include "algos/ring.h"
#include "lib/comm.h"
#include "lib/task.h"

typedef struct {
  int rounds;
  int sent;         /* sends posted so far: round k's send waits for round k-1's receive */
  weft__req reqs[]; /* [2k]: send of round k, [2k+1]: receive of round k */
} barrier_state;

static int nrounds(int n) {
  int k = 0;
  while ((1LL << k) < n) k++;
  return k;
}

static void post_send(weft__task *t, barrier_state *st) {
  struct weft_comm *comm = t->comm;
  int to = weft__ring_mod((long long)comm->rank + (1LL << st->sent), comm->nranks);
  weft__req_init_send(&st->reqs[2 * st->sent], &weft__mem_host, NULL, 0);
  weft__req_post(weft__comm_conn(comm, to), &st->reqs[2 * st->sent]);
  st->sent++;
}

static weft_status_t barrier_start(weft__task *t) {
  struct weft_comm *comm = t->comm;
  int rounds = nrounds(comm->nranks);
  weft_status_t status;
  /* not zeroed: each request is set before it is posted (lib/algo.h) */
  barrier_state *st =
      weft__algo_state_take(t, sizeof(barrier_state) + 2 * (size_t)rounds * sizeof(weft__req), 0, &status);
  if (st == NULL) return status;
  st->rounds = rounds;
  st->sent = 0;
  for (int k = 0; k < rounds; k++) {
    int from = weft__ring_mod((long long)comm->rank - (1LL << k), comm->nranks);
    weft__req_init_recv(&st->reqs[2 * k + 1], &weft__mem_host, NULL, NULL, 0, WEFT_UINT8, WEFT_SUM);
    weft__req_post(weft__comm_conn(comm, from), &st->reqs[2 * k + 1]);
  }
  if (rounds > 0) post_send(t, st);
  return WEFT_SUCCESS;
}

static weft_status_t barrier_progress(weft__task *t) {
  barrier_state *st = t->state;
  while (st->sent < st->rounds && st->reqs[2 * (st->sent - 1) + 1].complete) post_send(t, st);
  if (st->sent < st->rounds) return WEFT_IN_PROGRESS;
  for (int k = 0; k < st->rounds; k++)
    if (!st->reqs[2 * k].complete || !st->reqs[2 * k + 1].complete) return WEFT_IN_PROGRESS;
  return WEFT_SUCCESS;
}

const weft__algo weft__algo_barrier_dissemination = {
    .name = "dissemination", .coll = WEFT__COLL_BARRIER, .start = barrier_start,
    .progress = barrier_progress, .spaces = WEFT__MEM_KINDS_CPU};

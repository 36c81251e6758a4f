/* rounds.h: a driver for algorithms made of dependent rounds (recursive doubling and
 * halving, binomial trees, Bruck). Round i posts a few sends and receives; when all of them
 * have completed the algorithm's finish hook runs (a local reduction, a copy) and round
 * i+1 is posted. Rounds are strictly ordered, so a buffer a round reads is never written by
 * a later round while a request of the earlier one may still touch it, and two receives
 * from the same peer in different rounds are posted in the same order on both sides
 * (per-peer FIFO matching, see lib/req.h).
 *
 * Zero-byte messages are skipped on both sides: both ranks compute the same sizes. */
#ifndef WEFT_ALGOS_ROUNDS_H
#define WEFT_ALGOS_ROUNDS_H
#include "lib/comm.h"
#include "lib/req.h"
#include "lib/algo.h"
#include "lib/task.h"

typedef struct weft__rounds {
  int round, nrounds; /* the round in flight; rounds 0 .. nrounds-1 */
  int posted;         /* 1 once the round in flight was posted */
  int nreq, maxreq;   /* requests of the round in flight; capacity of req */
  weft__req *req;     /* [maxreq], inside the algorithm's state allocation */
  /* Posts round i's requests with weft__round_send / weft__round_recv. */
  void (*post)(weft__task *t, int i);
  /* Runs after every request of round i completed; NULL: nothing. */
  void (*finish)(weft__task *t, int i);
} weft__rounds;

static inline void weft__rounds_init(weft__rounds *r, int nrounds, weft__req *req, int maxreq,
                                     void (*post)(weft__task *, int),
                                     void (*finish)(weft__task *, int)) {
  r->round = 0;
  r->posted = 0;
  r->nrounds = nrounds;
  r->nreq = 0;
  r->maxreq = maxreq;
  r->req = req;
  r->post = post;
  r->finish = finish;
}

static inline void weft__round_post(weft__rounds *r, weft__task *t, int peer, weft__req *q) {
  r->nreq++;
  if (q->bytes == 0) {
    q->complete = 1;
    return;
  }
  weft__req_post(weft__comm_conn(t->comm, peer), q);
}

/* Sends bytes at buf to peer in the round being posted. */
static inline void weft__round_send(weft__rounds *r, weft__task *t, int peer, const void *buf,
                                    size_t bytes) {
  weft__req *q = &r->req[r->nreq];
  weft__req_init_send(q, t->mem, buf, bytes);
  weft__round_post(r, t, peer, q);
}

/* Receives bytes from peer into dst (acc NULL: copy; else dst = acc op incoming). */
static inline void weft__round_recv(weft__rounds *r, weft__task *t, int peer, void *dst,
                                    const void *acc, size_t bytes) {
  weft__req *q = &r->req[r->nreq];
  weft__req_init_recv(q, t->mem, dst, acc, bytes, t->dtype, t->op);
  weft__round_post(r, t, peer, q);
}

/* WEFT_IN_PROGRESS until the last round finished, then WEFT_SUCCESS. Posts round 0 on the
 * first call (start() may call it to get the first messages moving). */
static inline weft_status_t weft__rounds_progress(weft__rounds *r, weft__task *t) {
  while (r->round < r->nrounds) {
    if (!r->posted) {
      r->posted = 1;
      r->nreq = 0;
      r->post(t, r->round);
    }
    for (int i = 0; i < r->nreq; i++)
      if (!r->req[i].complete) return WEFT_IN_PROGRESS;
    if (r->finish) r->finish(t, r->round);
    r->round++;
    r->posted = 0;
  }
  return WEFT_SUCCESS;
}
#endif

/* exchange.h: the driver of the pairwise exchanges (all_to_all/pairwise.c,
 * all_to_allv/pairwise.c, all_gather/linear.c).
 *
 * Step s = 1 .. nsteps is one send and one receive, reqs[2 (s-1)] and reqs[2 (s-1) + 1],
 * which the algorithm's post hook initializes and posts. Steps are posted in increasing
 * order with at most weft__a2a_throttle(nsteps) in flight: step s once steps 1 .. s-W have
 * completed (algos/throttle.h says why, and why no W deadlocks). The call is done when
 * every request has completed. Not thread-safe: one task's state. */
#ifndef WEFT_ALGOS_EXCHANGE_H
#define WEFT_ALGOS_EXCHANGE_H
#include "algos/ring.h"
#include "algos/throttle.h"
#include "lib/comm.h"
#include "lib/req.h"
#include "lib/task.h"

typedef void (*weft__exchange_post_fn)(weft__task *t, int s);

typedef struct {
  int nreq, done;       /* 2 * nsteps; done: a completed prefix of reqs */
  int posted, throttle; /* steps posted so far; most steps in flight */
  weft__req *reqs;      /* 2 * nsteps requests, owned by the algorithm's state */
  weft__exchange_post_fn post;
} weft__exchange;

/* For the post hook: posts step s as a send of sbytes from src to rank r+s and a receive of
 * rbytes into dst from rank r-s (mod n, r this rank). staged: src is the algorithm's own
 * copy (weft__req.staged); nt: the receive's bytes go past the cache (weft__req.nt). */
static inline void weft__exchange_post_step(weft__exchange *x, weft__task *t, int s, const void *src, size_t sbytes,
                                            int staged, void *dst, size_t rbytes, int nt) {
  struct weft_comm *comm = t->comm;
  int r = comm->rank, n = comm->nranks;
  int to = weft__ring_mod((long long)r + s, n), from = weft__ring_mod((long long)r - s, n);
  weft__req *snd = &x->reqs[2 * (s - 1)], *rcv = &x->reqs[2 * (s - 1) + 1];
  weft__req_init_send(snd, t->mem, src, sbytes);
  snd->staged = (unsigned char)staged;
  weft__req_init_recv(rcv, t->mem, dst, NULL, rbytes, t->dtype, WEFT_SUM);
  rcv->nt = (unsigned char)nt;
  weft__req_post(weft__comm_conn(comm, to), snd);
  weft__req_post(weft__comm_conn(comm, from), rcv);
}

/* Posts steps while fewer than the throttle allows are in flight (done / 2 steps have completed). */
static inline void weft__exchange_fill(weft__exchange *x, weft__task *t) {
  while (x->posted < x->nreq / 2 && x->posted - x->done / 2 < x->throttle) x->post(t, ++x->posted);
}

/* Starts nsteps steps (0: nothing moves) and posts the first ones. */
static inline void weft__exchange_start(weft__exchange *x, weft__task *t, int nsteps, weft__req *reqs,
                                        weft__exchange_post_fn post) {
  x->nreq = 2 * nsteps;
  x->done = x->posted = 0;
  x->throttle = nsteps > 0 ? weft__a2a_throttle(nsteps) : 0;
  x->reqs = reqs;
  x->post = post;
  weft__exchange_fill(x, t);
}

/* After requests moved: WEFT_SUCCESS once every step completed, else posts what the
 * throttle now allows and returns WEFT_IN_PROGRESS. */
static inline weft_status_t weft__exchange_progress(weft__exchange *x, weft__task *t) {
  while (x->done < 2 * x->posted && x->reqs[x->done].complete) x->done++; /* only posted ones */
  if (x->done == x->nreq) return WEFT_SUCCESS;
  weft__exchange_fill(x, t);
  return WEFT_IN_PROGRESS;
}
#endif

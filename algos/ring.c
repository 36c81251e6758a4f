/* ring.c: the ring step driver (see ring.h) that the ring reduce-scatter, all-gather and
 * all-reduce run their schedules on.
 *
 * The driver keeps, per slice, how many sends and receives were posted and how long a prefix
 * of each has completed. Each connection completes its requests in FIFO order, so prefix
 * counters are exact and a progress call costs O(1) when nothing moved. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "algos/ring.h"
#include "lib/comm.h"
#include "lib/status.h"
#include "lib/task.h"

void weft__ring_driver_init(weft__ring_driver *d, weft__task *t, const weft__ring_ops *ops,
                            int nsteps, size_t nslices, weft__req *send, weft__req *recv) {
  struct weft_comm *comm = t->comm;
  d->ops = ops;
  d->nsteps = nsteps;
  d->nslices = nsteps > 0 ? nslices : 0;
  d->slice = 0;
  d->posted_send = d->done_send = d->posted_recv = d->done_recv = 0;
  d->next = weft__comm_conn(comm, weft__comm_ring_next(comm, comm->rank));
  d->prev = weft__comm_conn(comm, weft__comm_ring_prev(comm, comm->rank));
  d->send = send;
  d->recv = recv;
  d->nt = 0;
  d->fuse_steps = 0;
  d->slot_step = -1;
  d->avg_step = -1;
}

int weft__ring_nt_output(size_t out_bytes) { return out_bytes >= weft__mem_nt_threshold(); }

int weft__host_nt_output(const struct weft_comm *comm, size_t out_bytes) {
  size_t local = (size_t)weft__comm_host_nranks(comm);
  return out_bytes > SIZE_MAX / local || weft__ring_nt_output(out_bytes * local);
}

/* Posts r on c, or completes it at once when empty: the peer skips the same message. A
 * send its receive fed whole (weft__req.fwd) is complete already: it must not be queued,
 * where it would stay, complete, until the next progress pass, and the next slice would
 * reuse it. */
static void post_or_skip(weft__task *t, weft__conn *c, weft__req *r) {
  if (r->complete) {
    weft__req_retire(t->comm, c, r);
    return;
  }
  if (r->bytes == 0) {
    r->complete = 1;
    return;
  }
  weft__req_post(c, r);
}

static void advance_done(weft__ring_driver *d) {
  while (d->done_send < d->posted_send && d->send[d->done_send].complete) d->done_send++;
  while (d->done_recv < d->posted_recv && d->recv[d->done_recv].complete) d->done_recv++;
}

static int recv_ready(weft__ring_driver *d, weft__task *t) {
  if (d->posted_recv >= d->nsteps) return 0;
  return d->ops->recv_ready == NULL || d->ops->recv_ready(t, d, d->posted_recv);
}

/* The send of step s carries what step s-1 received. */
static int send_ready(const weft__ring_driver *d) {
  if (d->posted_send >= d->nsteps) return 0;
  return d->posted_send == 0 || d->done_recv >= d->posted_send;
}

/* 1 when the send of step s is fed by the receive before it (weft__req.fwd), which
 * initialised it when that receive was posted. */
static int send_fed(const weft__ring_driver *d, int s) { return s > 0 && d->recv[s - 1].fwd != NULL; }

/* Initialises the send of step s of the current slice (not posting it). */
static void prepare_send(weft__ring_driver *d, weft__task *t, int s) {
  weft__req *r = &d->send[s];
  const void *buf = NULL;
  size_t bytes = 0;
  d->ops->send_of(t, d->slice, s, &buf, &bytes);
  weft__req_init_send(r, t->mem, buf, bytes);
  if (d->ops->send_copy_to) r->copy_to = d->ops->send_copy_to(t, d->slice, s);
  r->nt = d->nt && r->copy_to != NULL;
}

/* Posts every request whose dependencies are met; returns 1 if it posted any. */
static int post_ready(weft__ring_driver *d, weft__task *t) {
  int posted = 0;
  advance_done(d);
  while (recv_ready(d, t)) {
    int s = d->posted_recv;
    weft__req *r = &d->recv[s];
    void *dst = NULL;
    const void *acc = NULL;
    size_t bytes = 0;
    d->ops->recv_of(t, d->slice, s, &dst, &acc, &bytes);
    weft__req_init_recv(r, t->mem, dst, acc, bytes, t->dtype, t->op);
    r->nt = d->nt && s == d->nsteps - 1;
    if (s == d->avg_step) r->avg_div = (unsigned short)t->comm->nranks;
    /* Send s+1 is posted only once this receive completed: initialised here instead. Its
     * bytes wait for send s (after), which must be this slice's: fed itself (initialised
     * with receive s-1), or send 0, initialised below before anything moves. */
    if (s < d->fuse_steps && s + 1 < d->nsteps && bytes > 0 && (s == 0 || send_fed(d, s))) {
      prepare_send(d, t, s + 1);
      r->fwd = &d->send[s + 1];
      r->fwd->conn = d->next;
      r->fwd->call = d->next->call;
      r->fwd->after = &d->send[s];
      r->fwd_skip_dst = s == d->slot_step;
    }
    d->posted_recv++;
    post_or_skip(t, d->prev, r);
    posted = 1;
    advance_done(d);
  }
  while (send_ready(d)) {
    weft__req *r = &d->send[d->posted_send];
    if (!send_fed(d, d->posted_send)) prepare_send(d, t, d->posted_send);
    d->posted_send++;
    post_or_skip(t, d->next, r);
    posted = 1;
    advance_done(d);
  }
  return posted;
}

weft_status_t weft__ring_driver_progress(weft__ring_driver *d, weft__task *t) {
  while (d->slice < d->nslices) {
    while (post_ready(d, t)) {
    }
    if (d->done_send < d->nsteps || d->done_recv < d->nsteps) return WEFT_IN_PROGRESS;
    if (d->ops->slice_done) d->ops->slice_done(t, d->slice);
    d->slice++;
    d->posted_send = d->done_send = d->posted_recv = d->done_recv = 0;
  }
  return WEFT_SUCCESS;
}

/* The chain driver's fixed cost per call, in alphas, as the ring's: on 2 ranks, where the
 * chain and the binomial tree both take one step and the model tied (the table's first row,
 * chain, won), the chain broadcast measured 0.23 us against the binomial's 0.17-0.18 us at
 * 8 B and 0.26-0.41 against 0.21-0.23 at 512 B, and no faster up to 1 MiB (bound, 2,000
 * calls, in place, 3 launches); reduce alike (0.21-0.24 against 0.18-0.21 us at 8-512 B). */
#define CHAIN_CALL_ALPHAS 0.13

double weft__chain_cost(const weft__cost_in *c, double per_byte) {
  /* Filling the pipeline takes n-2 chunk steps, then the chunks stream. */
  double piece = c->bytes < c->chunk ? c->bytes : c->chunk;
  return CHAIN_CALL_ALPHAS * c->a + (c->n - 2 + weft__cost_ceil_div(c->bytes, c->chunk)) * c->a +
         (c->n - 2) * piece * per_byte + c->bytes * per_byte;
}

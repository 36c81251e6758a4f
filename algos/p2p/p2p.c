/* p2p/p2p.c: point-to-point sends and receives: a single weft_send / weft_recv, or the sends
 * and receives of one group, progressed together.
 *
 * Every operation becomes one request on its peer's connection, all posted at start in call
 * order, so the i-th send to a peer matches that peer's i-th receive from us and a group of
 * any exchange pattern cannot deadlock. Sends to self are matched in order with receives from
 * self of the same group and done with a copy; one without a partner, or with a different
 * size, is an error raised before anything is posted. Message sizes are not rounded or
 * skipped: the transport checks that both sides agree.
 * Bytes: exactly what the caller asked. Source: NCCL's ncclSend / ncclRecv and groups. */
#include <stdint.h>
#include <string.h>
#include "algos/p2p/p2p.h"
#include "algos/ring.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/status.h"
#include "lib/task.h"

typedef struct {
  int nreq, done; /* done: a completed prefix of reqs */
  weft__fp_call *calls; /* [nops]: each request's pair fingerprint (after reqs) */
  weft__req reqs[];
} p2p_state;

/* Posts r with its pair's fingerprint (lib/fingerprint.h), kept in *call: the n-th send
 * to a peer is that peer's n-th receive from us, whatever collectives and other pairs do
 * meanwhile. */
static void post_pair(weft__conn *c, weft__req *r, weft__fp_call *call) {
  int is_send = r->kind == WEFT__REQ_SEND;
  uint32_t n = is_send ? ++c->p2p_sent : ++c->p2p_recvd;
  call->fp = weft__fp_make(WEFT__COLL_SEND, n, r->bytes, WEFT_UINT8, WEFT_SUM, -1);
  call->hash = weft__fp_hash(&call->fp);
  r->call = call;
  weft__req_post(c, r);
}

static weft_status_t single_start(weft__task *t, p2p_state *st) {
  struct weft_comm *comm = t->comm;
  int is_send = t->coll == WEFT__COLL_SEND;
  size_t bytes = t->count * weft__dtype_size(t->dtype);
  if (t->peer == comm->rank) {
    return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                       "rank %d: %s self outside a group: put the send and the matching recv "
                       "in one weft_group_start/end",
                       comm->rank, is_send ? "send to" : "recv from");
  }
  weft__req *r = &st->reqs[0];
  if (is_send) {
    weft__req_init_send(r, t->mem, t->sendbuf, bytes);
  } else {
    weft__req_init_recv(r, t->mem, t->recvbuf, NULL, bytes, t->dtype, WEFT_SUM);
  }
  post_pair(weft__comm_conn(comm, t->peer), r, &st->calls[0]);
  st->nreq = 1;
  return WEFT_SUCCESS;
}

/* Index of the next op at or after i that is a send (is_send 1) or recv (0) with self. */
static int next_self(const weft__task *t, int i, int is_send) {
  while (i < t->np2p && !(t->p2p[i].peer == t->comm->rank && !!t->p2p[i].is_send == is_send)) i++;
  return i;
}

/* Pairs the i-th send to self with the i-th recv from self; copies when do_copy. */
static weft_status_t match_self(weft__task *t, int do_copy) {
  int me = t->comm->rank, k = 0;
  for (int s = next_self(t, 0, 1), r = next_self(t, 0, 0); s < t->np2p || r < t->np2p;
       s = next_self(t, s + 1, 1), r = next_self(t, r + 1, 0), k++) {
    if (r >= t->np2p) {
      return weft__error(t->comm, WEFT_ERR_INVALID_USAGE,
                         "rank %d: group: send to self #%d of %zu bytes has no matching recv "
                         "from self in the same group",
                         me, k, t->p2p[s].bytes);
    }
    if (s >= t->np2p) {
      return weft__error(t->comm, WEFT_ERR_INVALID_USAGE,
                         "rank %d: group: recv from self #%d of %zu bytes has no matching send "
                         "to self in the same group",
                         me, k, t->p2p[r].bytes);
    }
    if (t->p2p[s].bytes != t->p2p[r].bytes) {
      return weft__error(t->comm, WEFT_ERR_INVALID_USAGE,
                         "rank %d: group: send to self #%d of %zu bytes has no matching recv "
                         "from self: recv #%d expects %zu bytes",
                         me, k, t->p2p[s].bytes, k, t->p2p[r].bytes);
    }
    if (do_copy && t->p2p[s].bytes > 0 && t->p2p[r].buf != t->p2p[s].buf) {
      weft__mem_copy(t->p2p[r].mem, t->p2p[r].buf, t->p2p[s].buf, t->p2p[s].bytes, WEFT__MEM_OVERLAP);
    }
  }
  return WEFT_SUCCESS;
}

/* A receive that writes bytes another rank sent: what an exchange's send must stay clear of. */
static int writes_from_peer(const weft__p2p_op *op, int self) {
  return !op->is_send && op->peer != self && op->bytes > 0;
}

weft__p2p_span weft__p2p_recv_span(const weft__p2p_op *ops, int nops, int self) {
  weft__p2p_span span = {UINTPTR_MAX, 0};
  for (int i = 0; i < nops; i++) {
    if (!writes_from_peer(&ops[i], self)) continue;
    uintptr_t a = (uintptr_t)ops[i].buf;
    if (a < span.lo) span.lo = a;
    if (a + ops[i].bytes > span.hi) span.hi = a + ops[i].bytes;
  }
  if (span.hi == 0) span.lo = 0;
  return span;
}

int weft__p2p_send_in_exchange(const weft__p2p_op *ops, int nops, int self, const weft__p2p_op *send,
                               weft__p2p_span span) {
  uintptr_t a = (uintptr_t)send->buf, b = a + send->bytes;
  if (span.lo == span.hi) return 0;
  if (b <= span.lo || a >= span.hi) return 1;
  for (int i = 0; i < nops; i++) {
    if (!writes_from_peer(&ops[i], self)) continue;
    if (a < (uintptr_t)ops[i].buf + ops[i].bytes && (uintptr_t)ops[i].buf < b) return 0;
  }
  return 1;
}

static weft_status_t group_start(weft__task *t, p2p_state *st) {
  struct weft_comm *comm = t->comm;
  WEFT_TRY(match_self(t, 0));
  WEFT_TRY(match_self(t, 1));
  weft__p2p_span span = weft__p2p_recv_span(t->p2p, t->np2p, comm->rank);
  for (int i = 0; i < t->np2p; i++) {
    const weft__p2p_op *op = &t->p2p[i];
    if (op->peer == comm->rank) continue;
    weft__req *r = &st->reqs[st->nreq++];
    if (op->is_send) {
      weft__req_init_send(r, op->mem, op->buf, op->bytes);
      r->p2p_exchange = (unsigned char)weft__p2p_send_in_exchange(t->p2p, t->np2p, comm->rank, op, span);
    } else {
      weft__req_init_recv(r, op->mem, op->buf, NULL, op->bytes, WEFT_UINT8, WEFT_SUM);
    }
    post_pair(weft__comm_conn(comm, op->peer), r, &st->calls[st->nreq - 1]);
  }
  return WEFT_SUCCESS;
}

static weft_status_t p2p_start(weft__task *t) {
  int group = t->coll == WEFT__COLL_P2P_GROUP;
  int nops = group ? t->np2p : 1;
  weft_status_t status;
  size_t k = (size_t)(nops > 0 ? nops : 0);
  /* not zeroed: each request and fingerprint is set when posted (lib/algo.h) */
  p2p_state *st = weft__algo_state_take(
      t, sizeof(p2p_state) + k * (sizeof(weft__req) + sizeof(weft__fp_call)), 0, &status);
  if (st == NULL) return status;
  st->nreq = st->done = 0;
  st->calls = (weft__fp_call *)(st->reqs + k);
  return group ? group_start(t, st) : single_start(t, st);
}

/* Requests of different peers complete in any order; the prefix scan stays cheap. */
static weft_status_t p2p_progress(weft__task *t) {
  p2p_state *st = t->state;
  while (st->done < st->nreq && st->reqs[st->done].complete) st->done++;
  return st->done == st->nreq ? WEFT_SUCCESS : WEFT_IN_PROGRESS;
}

/* One algorithm, three rows: a send, a receive, and the sends and receives of a group. */
const weft__algo weft__algo_send = {
    .name = "p2p", .coll = WEFT__COLL_SEND, .start = p2p_start, .progress = p2p_progress, .spaces = WEFT__MEM_KINDS_CPU};
const weft__algo weft__algo_recv = {
    .name = "p2p", .coll = WEFT__COLL_RECV, .start = p2p_start, .progress = p2p_progress, .spaces = WEFT__MEM_KINDS_CPU};
const weft__algo weft__algo_p2p_group = {
    .name = "p2p", .coll = WEFT__COLL_P2P_GROUP, .start = p2p_start, .progress = p2p_progress, .spaces = WEFT__MEM_KINDS_CPU};

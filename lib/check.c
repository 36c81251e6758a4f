/* check.c: WEFT_CHECK=1 (check.h). Why a separate exchange when every message already
 * carries its call's fingerprint: an algorithm only meets some peers (a ring its two
 * neighbours, a broadcast root nobody), so a rank may finish, or only wait, without seeing
 * the call that differs. Exchanging with every peer before the call makes each rank see
 * every other's call: all fail at once, each with the mismatch itself. all_to_allv's
 * per-pair counts, which no fingerprint can carry, are compared here too. */
#include <stdio.h>
#include <stdlib.h>
#include "lib/algo.h"
#include "lib/check.h"
#include "lib/comm.h"
#include "lib/status.h"
#include "lib/task.h"
#include "mem/space.h"

typedef struct {
  weft__fp fp;
  uint64_t to_you;   /* all_to_allv: elements the sender sends the receiver (else 0) */
  uint64_t from_you; /* all_to_allv: elements the sender expects from the receiver */
} check_msg;

typedef struct {
  int nreq;
  weft__req *reqs;
} check_state;

static weft_status_t check_start(weft__task *ct) { return WEFT_IN_PROGRESS; }

static weft_status_t check_progress(weft__task *ct) {
  const check_state *st = ct->state;
  for (int i = 0; i < st->nreq; i++)
    if (!st->reqs[i].complete) return WEFT_IN_PROGRESS;
  return WEFT_SUCCESS;
}

static const weft__algo check_algo = {.name = "WEFT_CHECK exchange", .start = check_start,
                                      .progress = check_progress};

/* Compares peer p's message with this rank's call. */
static weft_status_t compare(weft__task *t, int p, const check_msg *in) {
  struct weft_comm *comm = t->comm;
  if (!weft__fp_equal(&in->fp, &comm->call.fp)) return weft__fp_mismatch(comm, p, &comm->call.fp, &in->fp);
  if (t->coll != WEFT__COLL_ALL_TO_ALLV) return WEFT_SUCCESS;
  size_t expect = WEFT__V_RECVCOUNTS(t)[p], send = WEFT__V_SENDCOUNTS(t)[p];
  if (in->to_you != expect)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: all_to_allv #%llu: rank %d sends %llu "
                       "elements to rank %d, which expects %zu (its recvcounts[%d])", comm->rank,
                       (unsigned long long)t->seq, p, (unsigned long long)in->to_you, comm->rank, expect, p);
  if (in->from_you != send)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: all_to_allv #%llu: rank %d expects %llu "
                       "elements from rank %d, which sends %zu (its sendcounts[%d])", comm->rank,
                       (unsigned long long)t->seq, p, (unsigned long long)in->from_you, comm->rank, send, p);
  return WEFT_SUCCESS;
}

/* Drives reqs[0..k) to completion (lib/task.h's waits and deadline). */
static weft_status_t drive_all(weft__task *t, weft__req *reqs, int k) {
  weft__task ct;
  weft__task_init(&ct, t->comm, t->coll);
  ct.seq = t->seq;
  ct.algo = &check_algo;
  check_state st = {k, reqs};
  ct.state = &st;
  return weft__task_drive(&ct);
}

/* Sends first, all of them, then receives: a receive that finds a mismatch ends the wait,
 * and a send still queued then would leave that peer without our call to compare. Small
 * sends complete without their receiver (LL lines, a socket buffer). */
static weft_status_t exchange(weft__task *t, check_msg *out, check_msg *in, weft__req *reqs) {
  struct weft_comm *comm = t->comm;
  int n = comm->nranks, k = 0;
  for (int p = 0; p < n; p++) {
    if (p == comm->rank) continue;
    out[p].fp = comm->call.fp;
    if (t->coll == WEFT__COLL_ALL_TO_ALLV) {
      out[p].to_you = WEFT__V_SENDCOUNTS(t)[p];
      out[p].from_you = WEFT__V_RECVCOUNTS(t)[p];
    }
    weft__req_init_send(&reqs[k], &weft__mem_host, &out[p], sizeof(check_msg));
    weft__req_post(weft__comm_conn(comm, p), &reqs[k++]);
  }
  WEFT_TRY(drive_all(t, reqs, k));
  k = 0;
  for (int p = 0; p < n; p++) {
    if (p == comm->rank) continue;
    weft__req_init_recv(&reqs[k], &weft__mem_host, &in[p], NULL, sizeof(check_msg), WEFT_UINT8, WEFT_SUM);
    weft__req_post(weft__comm_conn(comm, p), &reqs[k++]);
  }
  weft_status_t rc = drive_all(t, reqs, k);
  for (int p = 0; p < n && rc == WEFT_SUCCESS; p++)
    if (p != comm->rank) rc = compare(t, p, &in[p]);
  return rc;
}

weft_status_t weft__check_call(weft__task *t) {
  struct weft_comm *comm = t->comm;
  int n = comm->nranks;
  if (n == 1) return WEFT_SUCCESS;
  check_msg *out = calloc((size_t)n * 2, sizeof(check_msg));
  weft__req *reqs = calloc((size_t)n * 2, sizeof(weft__req));
  weft_status_t rc = out == NULL || reqs == NULL
                         ? weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: WEFT_CHECK: out of memory", comm->rank)
                         : exchange(t, out, out + n, reqs);
  if (rc != WEFT_SUCCESS) {
    weft__comm_drop_requests(comm);
    comm->broken = 1;
  }
  free(out);
  free(reqs);
  return rc;
}

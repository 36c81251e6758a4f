/* nccl_coll.c: NCCL's collectives, point-to-point calls and groups on weft.
 *
 * Each call checks its communicator, datatype and stream and becomes a nccl__call. Outside a
 * group it runs at once (a weft stream is synchronized before returning). Inside a group it
 * is recorded; the outermost ncclGroupEnd replays the calls of each communicator inside one
 * weft group, so that a communicator's sends and receives progress together. When the group
 * spans several communicators (one thread driving the ranks of ncclCommInitAll, as with
 * NCCL), each communicator's calls run on a thread of their own, since one rank's collective
 * would otherwise wait for a rank whose calls come later on the same thread. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "nccl/nccl_internal.h"

typedef enum {
  CALL_ALL_REDUCE, CALL_REDUCE, CALL_REDUCE_SCATTER, CALL_BROADCAST, CALL_ALL_GATHER,
  CALL_ALL_TO_ALL, CALL_GATHER, CALL_SCATTER, CALL_SEND, CALL_RECV
} call_kind;

typedef struct {
  call_kind kind;
  const void *send;
  void *recv;
  size_t count;
  weft_datatype_t dt;
  weft_redop_t op;
  int root;            /* root, or peer for send and recv */
  ncclComm_t comm;
  weft_stream_t stream;
  int async;           /* stream is bound to a CUDA stream: the call returns once queued */
  nccl__scaled scaled; /* a PreMulSum op's scaled input, released after the call */
} nccl__call;

/* The caller must wait for c before it returns: on a weft stream of its own, or on a CUDA
 * stream when c reads a host copy of the input (PreMulSum) that is freed after the call. */
static int must_wait(const nccl__call *c) {
  return c->stream != NULL && (!c->async || (c->scaled.p != NULL && !c->scaled.on_device));
}

static weft_status_t execute(const nccl__call *c) {
  weft_comm_t w = c->comm->w;
  const void *in = c->scaled.p != NULL ? c->scaled.p : c->send;
  switch (c->kind) {
    case CALL_ALL_REDUCE: return weft_all_reduce(in, c->recv, c->count, c->dt, c->op, w, c->stream);
    case CALL_REDUCE: return weft_reduce(in, c->recv, c->count, c->dt, c->op, c->root, w, c->stream);
    case CALL_REDUCE_SCATTER: return weft_reduce_scatter(in, c->recv, c->count, c->dt, c->op, w, c->stream);
    case CALL_BROADCAST: return weft_broadcast(in, c->recv, c->count, c->dt, c->root, w, c->stream);
    case CALL_ALL_GATHER: return weft_all_gather(in, c->recv, c->count, c->dt, w, c->stream);
    case CALL_ALL_TO_ALL: return weft_all_to_all(in, c->recv, c->count, c->dt, w, c->stream);
    case CALL_GATHER: return weft_gather(in, c->recv, c->count, c->dt, c->root, w, c->stream);
    case CALL_SCATTER: return weft_scatter(in, c->recv, c->count, c->dt, c->root, w, c->stream);
    case CALL_SEND: return weft_send(in, c->count, c->dt, c->root, w, c->stream);
    case CALL_RECV: return weft_recv(c->recv, c->count, c->dt, c->root, w, c->stream);
  }
  return WEFT_ERR_INTERNAL;
}

/* ---- this thread's group ------------------------------------------------------------- */

static __thread int group_depth;
static __thread nccl__call *group_calls;
static __thread size_t group_n, group_cap;

static int in_group(void) { return group_depth > 0; }

static void discard_group(void) {
  for (size_t i = 0; i < group_n; i++) nccl__scaled_release(&group_calls[i].scaled);
  group_n = 0;
}

int nccl__in_group(void) { return in_group(); }

/* Communicators whose init started inside this thread's group (ncclCommInitRank between
 * ncclGroupStart and ncclGroupEnd, as nccl-tests inits several ranks from one thread): the
 * inits run non-blocking and the outermost ncclGroupEnd waits for them. */
static __thread ncclComm_t *group_inits;
static __thread size_t group_ninits, group_cap_inits;

ncclResult_t nccl__group_defer_init(ncclComm_t comm) {
  if (group_ninits == group_cap_inits) {
    size_t cap = group_cap_inits ? 2 * group_cap_inits : 8;
    ncclComm_t *t = realloc(group_inits, cap * sizeof(*t));
    if (t == NULL) return nccl__fail(ncclSystemError, "rank %d: out of memory recording a grouped init", comm->rank);
    group_inits = t, group_cap_inits = cap;
  }
  group_inits[group_ninits++] = comm;
  return ncclSuccess;
}

/* Waits for every init deferred to this group's end; the first failure is the result. */
static ncclResult_t finish_inits(void) {
  ncclResult_t r = ncclSuccess;
  for (size_t i = 0; i < group_ninits; i++) {
    weft_status_t st = nccl__wait_init(group_inits[i]->w);
    if (st != WEFT_SUCCESS && r == ncclSuccess) r = nccl__from_weft(st);
  }
  group_ninits = 0;
  return r;
}

static ncclResult_t record(const nccl__call *c) {
  if (group_n == group_cap) {
    size_t cap = group_cap ? 2 * group_cap : 16;
    nccl__call *t = realloc(group_calls, cap * sizeof(*t));
    if (t == NULL) {
      nccl__scaled scaled = c->scaled;
      nccl__scaled_release(&scaled);
      return nccl__fail(ncclSystemError, "rank %d: out of memory recording a grouped call", c->comm->rank);
    }
    group_calls = t, group_cap = cap;
  }
  group_calls[group_n++] = *c;
  return ncclSuccess;
}

/* Runs c now (outside a group) or records it; owns c->scaled either way. On a CUDA stream
 * the call returns once queued, as NCCL's do (its errors come from ncclCommGetAsyncError and
 * the next call); on a weft stream it is waited for. */
static ncclResult_t submit(nccl__call *c) {
  if (in_group()) return record(c);
  weft_status_t st = execute(c);
  if (st == WEFT_SUCCESS && must_wait(c)) st = weft_stream_synchronize(c->stream);
  nccl__scaled_release(&c->scaled);
  return nccl__from_weft(st);
}

/* One communicator's share of a group: its calls, in order, inside one weft group (weft's
 * group state is per thread, so each share may run on a thread of its own). */
typedef struct {
  ncclComm_t comm;
  const nccl__call *calls;
  size_t n;
  weft_status_t st;
  char error[512];
} comm_share;

static void *run_share(void *arg) {
  comm_share *s = arg;
  weft_stream_t stream = NULL;
  weft_group_start();
  for (size_t i = 0; i < s->n; i++)
    if (s->calls[i].comm == s->comm) {
      execute(&s->calls[i]);
      if (must_wait(&s->calls[i])) stream = s->calls[i].stream;
    }
  s->st = weft_group_end();
  if (s->st == WEFT_SUCCESS && stream != NULL) s->st = weft_stream_synchronize(stream);
  if (s->st != WEFT_SUCCESS) strncpy(s->error, weft_get_last_error(NULL), sizeof(s->error) - 1);
  return NULL;
}

/* Runs every share, each on its own thread when there are several. */
static void run_shares(comm_share *shares, size_t ncomms) {
  pthread_t *threads = ncomms > 1 ? calloc(ncomms, sizeof(*threads)) : NULL;
  int *started = ncomms > 1 ? calloc(ncomms, sizeof(*started)) : NULL;
  for (size_t j = 0; j < ncomms; j++) {
    if (threads != NULL && started != NULL && pthread_create(&threads[j], NULL, run_share, &shares[j]) == 0)
      started[j] = 1;
    else if (ncomms == 1)
      run_share(&shares[j]);
    else
      shares[j].st = WEFT_ERR_SYSTEM, strcpy(shares[j].error, "ncclGroupEnd: cannot start a thread per communicator");
  }
  for (size_t j = 0; j < ncomms; j++)
    if (started != NULL && started[j]) pthread_join(threads[j], NULL);
  free(threads);
  free(started);
}

static ncclResult_t replay_group(void) {
  size_t ncomms = 0;
  comm_share *shares = calloc(group_n ? group_n : 1, sizeof(*shares));
  if (shares == NULL) return discard_group(), nccl__fail(ncclSystemError, "ncclGroupEnd: out of memory");
  for (size_t i = 0; i < group_n; i++) {
    size_t j = 0;
    while (j < ncomms && shares[j].comm != group_calls[i].comm) j++;
    if (j == ncomms) shares[ncomms].comm = group_calls[i].comm, shares[ncomms].calls = group_calls,
                     shares[ncomms++].n = group_n;
  }
  run_shares(shares, ncomms);
  ncclResult_t r = ncclSuccess;
  for (size_t j = 0; j < ncomms && r == ncclSuccess; j++)
    if (shares[j].st != WEFT_SUCCESS) {
      weft_status_t st = shares[j].st;
      r = nccl__fail(nccl__from_weft(st), "%s", shares[j].error);
    }
  free(shares);
  discard_group();
  return r;
}

NCCL_API(ncclResult_t, ncclGroupStart, void) {
  group_depth++;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void) {
  if (group_depth == 0) return nccl__fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  ncclResult_t r = finish_inits();
  if (r != ncclSuccess) return discard_group(), r;
  return replay_group();
}

/* weft has no cost estimate to offer: the recorded calls are discarded, not run, and the
 * caller is told. */
NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t *simInfo) {
  if (group_depth == 0) return nccl__fail(ncclInvalidUsage, "ncclGroupSimulateEnd without ncclGroupStart");
  if (--group_depth == 0) finish_inits(), discard_group();
  return nccl__fail(ncclInvalidUsage, "ncclGroupSimulateEnd: weft has no cost estimate to report; "
                    "the group's calls were discarded, not run");
}

/* ---- the calls ------------------------------------------------------------------------ */

/* The common checks: communicator, datatype and stream; fills c. */
static ncclResult_t prepare(nccl__call *c, call_kind kind, const void *send, void *recv, size_t count,
                            ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t s, const char *what) {
  memset(c, 0, sizeof(*c));
  c->kind = kind, c->send = send, c->recv = recv, c->count = count, c->root = root, c->comm = comm;
  ncclResult_t r = nccl__check_comm(comm, what);
  if (r == ncclSuccess) r = nccl__dtype(dt, &c->dt, what);
  if (r == ncclSuccess) r = nccl__stream(s, &c->stream, &c->async, what);
  if (r == ncclSuccess) nccl__cuda_see(send, recv); /* weft then recognises device pointers */
  return r;
}

/* A reduction: also resolves op (a PreMulSum op scales `inputs` elements of send). */
static ncclResult_t reduction(call_kind kind, const void *send, void *recv, size_t count, size_t inputs,
                              ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s,
                              const char *what) {
  nccl__call c;
  ncclResult_t r = prepare(&c, kind, send, recv, count, dt, root, comm, s, what);
  /* A device input is scaled in the stream the call runs in: the caller's CUDA stream, or the
   * legacy default stream (NULL) where weft runs a blocking call on device buffers. */
  cudaStream_t cs = c.async ? s : NULL;
  if (r == ncclSuccess) r = nccl__resolve_op(comm, op, dt, send, inputs, cs, &c.op, &c.scaled, what);
  return r == ncclSuccess ? submit(&c) : r;
}

static ncclResult_t movement(call_kind kind, const void *send, void *recv, size_t count, ncclDataType_t dt,
                             int root, ncclComm_t comm, cudaStream_t s, const char *what) {
  nccl__call c;
  ncclResult_t r = prepare(&c, kind, send, recv, count, dt, root, comm, s, what);
  return r == ncclSuccess ? submit(&c) : r;
}

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return reduction(CALL_ALL_REDUCE, sendbuff, recvbuff, count, count, datatype, op, 0, comm, stream,
                   "ncclAllReduce");
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return reduction(CALL_REDUCE, sendbuff, recvbuff, count, count, datatype, op, root, comm, stream,
                   "ncclReduce");
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  size_t inputs = comm != NULL ? recvcount * (size_t)comm->nranks : 0;
  return reduction(CALL_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, inputs, datatype, op, 0, comm,
                   stream, "ncclReduceScatter");
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return movement(CALL_BROADCAST, sendbuff, recvbuff, count, datatype, root, comm, stream, "ncclBroadcast");
}

NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream) {
  return movement(CALL_BROADCAST, buff, buff, count, datatype, root, comm, stream, "ncclBcast");
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return movement(CALL_ALL_GATHER, sendbuff, recvbuff, sendcount, datatype, 0, comm, stream, "ncclAllGather");
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return movement(CALL_ALL_TO_ALL, sendbuff, recvbuff, count, datatype, 0, comm, stream, "ncclAlltoAll");
}

NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return movement(CALL_GATHER, sendbuff, recvbuff, count, datatype, root, comm, stream, "ncclGather");
}

NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return movement(CALL_SCATTER, sendbuff, recvbuff, count, datatype, root, comm, stream, "ncclScatter");
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
  return movement(CALL_SEND, sendbuff, NULL, count, datatype, peer, comm, stream, "ncclSend");
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
  return movement(CALL_RECV, NULL, recvbuff, count, datatype, peer, comm, stream, "ncclRecv");
}

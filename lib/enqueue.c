/* enqueue.c: the collective and point-to-point entry points. Each checks its arguments
 * (so a bad call fails at once, on the calling rank, with a message naming it), describes
 * the operation as a task, and launches it: recorded in a group, queued on a stream, or run
 * to completion now. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/group.h"
#include "lib/status.h"
#include "lib/stream.h"
#include "lib/task.h"
#include "mem/space.h"

typedef struct {
  weft__coll_t coll;
  const void *sendbuf;
  void *recvbuf;
  size_t count;          /* as the caller gave it */
  size_t send_elems;     /* elements sendbuf holds on this rank */
  size_t recv_elems;     /* elements recvbuf holds on this rank */
  weft_datatype_t dtype;
  weft_redop_t op;       /* only checked for reductions */
  int root, peer;
} call_args;

static int is_reduction(weft__coll_t c) {
  return c == WEFT__COLL_ALL_REDUCE || c == WEFT__COLL_REDUCE || c == WEFT__COLL_REDUCE_SCATTER;
}

/* elems * size overflowing size_t or the address space is an error, not a wrap-around.
 * A checked multiply, not a division: two 64-bit divisions per call were on every call's
 * latency path. */
static int extent_overflows(const void *buf, size_t elems, size_t esize) {
  size_t bytes;
  if (esize == 0 || __builtin_mul_overflow(elems, esize, &bytes) || bytes > (size_t)PTRDIFF_MAX) return 1;
  return buf != NULL && (uintptr_t)buf + bytes < (uintptr_t)buf;
}

/* The name is looked up here, for the message only: the call that passes pays nothing. */
static weft_status_t bad(struct weft_comm *comm, weft__coll_t coll, const char *what) {
  weft_status_t st = weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "rank %d: %s: %s", comm->rank,
                                 weft__coll_name(coll), what);
  if (weft__group_active()) weft__group_fail(st);
  return st;
}

static weft_status_t check_args(struct weft_comm *comm, const call_args *a) {
  char msg[200];
  if (!weft__dtype_valid(a->dtype)) {
    snprintf(msg, sizeof(msg), "invalid datatype %d (valid: 0..%d)", (int)a->dtype, WEFT_NUM_DATATYPES - 1);
    return bad(comm, a->coll, msg);
  }
  if (is_reduction(a->coll) && !weft__op_valid(a->op)) {
    snprintf(msg, sizeof(msg), "invalid reduction op %d (valid: 0..%d)", (int)a->op, WEFT_NUM_OPS - 1);
    return bad(comm, a->coll, msg);
  }
  int rooted = a->coll == WEFT__COLL_BROADCAST || a->coll == WEFT__COLL_REDUCE ||
               a->coll == WEFT__COLL_GATHER || a->coll == WEFT__COLL_SCATTER;
  int p2p = a->coll == WEFT__COLL_SEND || a->coll == WEFT__COLL_RECV;
  int who = rooted ? a->root : a->peer;
  if ((rooted || p2p) && (who < 0 || who >= comm->nranks)) {
    snprintf(msg, sizeof(msg), "%s %d is outside [0, %d)", rooted ? "root" : "peer", who, comm->nranks);
    return bad(comm, a->coll, msg);
  }
  size_t esize = weft__dtype_size(a->dtype);
  if (extent_overflows(a->sendbuf, a->send_elems, esize) || extent_overflows(a->recvbuf, a->recv_elems, esize)) {
    snprintf(msg, sizeof(msg), "count %zu of %s overflows the size of a buffer", a->count, weft__dtype_name(a->dtype));
    return bad(comm, a->coll, msg);
  }
  if (a->send_elems > 0 && a->sendbuf == NULL) return bad(comm, a->coll, "sendbuf is NULL but count > 0");
  if (a->recv_elems > 0 && a->recvbuf == NULL) return bad(comm, a->coll, "recvbuf is NULL but count > 0");
  return WEFT_SUCCESS;
}

/* count * n, or SIZE_MAX when that overflows (then caught as an overflowing extent). */
static size_t times(size_t count, int n) {
  return count > SIZE_MAX / (size_t)n ? SIZE_MAX : count * (size_t)n;
}

static weft_status_t null_comm(weft__coll_t coll) {
  weft_status_t st = weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "%s: comm is NULL", weft__coll_name(coll));
  if (weft__group_active()) weft__group_fail(st);
  return st;
}

/* The memory space of the call's buffers (mem/space.h); one lookup only while some memory
 * outside the host space exists. Buffers in two different such spaces are an error. */
static weft_status_t find_space(struct weft_comm *comm, const call_args *a, const weft__mem_space **mem) {
  *mem = weft__mem_space_of2(a->sendbuf, a->recvbuf);
  if (*mem != NULL) return WEFT_SUCCESS;
  return bad(comm, a->coll, "sendbuf and recvbuf lie in two different memory spaces");
}

/* Checks the call and describes it as a new task (not yet launched). */
static weft_status_t check_call(struct weft_comm *comm, const call_args *a, const weft__mem_space **mem) {
  if (comm == NULL) return null_comm(a->coll);
  WEFT_TRY(check_args(comm, a));
  WEFT_TRY(find_space(comm, a, mem));
  if (atomic_load(&comm->aborted))
    return weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: %s: the communicator was aborted", comm->rank,
                       weft__coll_name(a->coll));
  return WEFT_SUCCESS;
}

static void fill_task(weft__task *t, const call_args *a, const weft__mem_space *mem) {
  t->mem = mem;
  t->sendbuf = a->sendbuf;
  t->recvbuf = a->recvbuf;
  t->count = a->count;
  t->dtype = a->dtype;
  t->op = is_reduction(a->coll) ? a->op : WEFT_SUM;
  t->root = a->root;
  t->peer = a->peer;
}

/* A task for a call queued on stream outside a group comes from the stream's kept tasks
 * (lib/stream.c says why); a group's tasks are folded and freed by lib/group.c. */
static weft_status_t make_task(struct weft_comm *comm, const call_args *a, weft_stream_t stream, weft__task **out) {
  const weft__mem_space *mem = &weft__mem_host;
  WEFT_TRY(check_call(comm, a, &mem));
  weft__task *t = NULL;
  if (stream != NULL && !weft__group_active()) WEFT_TRY(weft__stream_task_new(stream, comm, a->coll, &t));
  else WEFT_TRY(weft__task_new(comm, a->coll, &t));
  fill_task(t, a, mem);
  *out = t;
  return WEFT_SUCCESS;
}

/* Records t in the open group, queues it on stream, or runs it now. Takes ownership. */
static weft_status_t submit(weft__task *t, weft_stream_t stream) {
  if (weft__group_active()) return weft__group_add(t, stream);
  return weft__launch_now(t, stream);
}

/* A blocking call outside a group runs to completion before returning, so its task lives
 * on this stack frame: with the algorithm's state inline, no heap allocation at all. */
static weft_status_t launch(struct weft_comm *comm, const call_args *a, weft_stream_t stream) {
  if (stream == NULL && !weft__group_active()) {
    const weft__mem_space *mem = &weft__mem_host;
    WEFT_TRY(check_call(comm, a, &mem));
    if (mem->kind == WEFT__MEM_CUDA) { /* device buffers: in CUDA's order (lib/stream_cuda.h) */
      weft__task *dt = NULL;
      WEFT_TRY(weft__task_new(comm, a->coll, &dt));
      fill_task(dt, a, mem);
      return weft__launch_now(dt, NULL);
    }
    weft__task t;
    weft__task_init(&t, comm, a->coll);
    fill_task(&t, a, mem);
    weft_status_t st = weft__task_run(&t);
    weft__task_release(&t);
    return st;
  }
  weft__task *t = NULL;
  WEFT_TRY(make_task(comm, a, stream, &t));
  return submit(t, stream);
}

weft_status_t weft_all_reduce(const void *sendbuf, void *recvbuf, size_t count, weft_datatype_t datatype,
                              weft_redop_t op, weft_comm_t comm, weft_stream_t stream) {
  call_args a = {WEFT__COLL_ALL_REDUCE, sendbuf, recvbuf, count, count, count, datatype, op, -1, -1};
  return launch(comm, &a, stream);
}

weft_status_t weft_broadcast(const void *sendbuf, void *recvbuf, size_t count, weft_datatype_t datatype, int root,
                             weft_comm_t comm, weft_stream_t stream) {
  int is_root = comm != NULL && comm->rank == root;
  call_args a = {WEFT__COLL_BROADCAST, sendbuf, recvbuf, count, is_root ? count : 0, count, datatype, WEFT_SUM,
                 root, -1};
  return launch(comm, &a, stream);
}

weft_status_t weft_reduce(const void *sendbuf, void *recvbuf, size_t count, weft_datatype_t datatype,
                          weft_redop_t op, int root, weft_comm_t comm, weft_stream_t stream) {
  int is_root = comm != NULL && comm->rank == root;
  call_args a = {WEFT__COLL_REDUCE, sendbuf, recvbuf, count, count, is_root ? count : 0, datatype, op, root, -1};
  return launch(comm, &a, stream);
}

weft_status_t weft_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount, weft_datatype_t datatype,
                              weft_comm_t comm, weft_stream_t stream) {
  size_t all = comm != NULL ? times(sendcount, comm->nranks) : sendcount;
  call_args a = {WEFT__COLL_ALL_GATHER, sendbuf, recvbuf, sendcount, sendcount, all, datatype, WEFT_SUM, -1, -1};
  return launch(comm, &a, stream);
}

weft_status_t weft_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount, weft_datatype_t datatype,
                                  weft_redop_t op, weft_comm_t comm, weft_stream_t stream) {
  size_t all = comm != NULL ? times(recvcount, comm->nranks) : recvcount;
  call_args a = {WEFT__COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, all, recvcount, datatype, op, -1, -1};
  return launch(comm, &a, stream);
}

weft_status_t weft_all_to_all(const void *sendbuf, void *recvbuf, size_t count, weft_datatype_t datatype,
                              weft_comm_t comm, weft_stream_t stream) {
  size_t all = comm != NULL ? times(count, comm->nranks) : count;
  call_args a = {WEFT__COLL_ALL_TO_ALL, sendbuf, recvbuf, count, all, all, datatype, WEFT_SUM, -1, -1};
  return launch(comm, &a, stream);
}

/* ---- all_to_allv: per-peer counts and displacements ------------------------------------ */

/* Elements a buffer must hold for blocks (counts[p] at displs[p]): the end of the last
 * non-empty block, or SIZE_MAX when one overflows (then caught as an overflowing extent).
 * *lo is the start of the first non-empty block (SIZE_MAX when all are empty). */
static size_t v_extent(const size_t *counts, const size_t *displs, int n, size_t *lo) {
  size_t hi = 0;
  *lo = SIZE_MAX;
  for (int p = 0; p < n; p++) {
    if (counts[p] == 0) continue;
    if (displs[p] > SIZE_MAX - counts[p]) return SIZE_MAX;
    if (displs[p] + counts[p] > hi) hi = displs[p] + counts[p];
    if (displs[p] < *lo) *lo = displs[p];
  }
  return hi;
}

/* 1 when the used byte ranges [lo, hi) of sendbuf and recvbuf overlap. */
static int v_overlap(const void *sendbuf, size_t slo, size_t shi, const void *recvbuf, size_t rlo, size_t rhi,
                     size_t esize) {
  if (slo >= shi || rlo >= rhi) return 0;
  uintptr_t s0 = (uintptr_t)sendbuf + slo * esize, s1 = (uintptr_t)sendbuf + shi * esize;
  uintptr_t r0 = (uintptr_t)recvbuf + rlo * esize, r1 = (uintptr_t)recvbuf + rhi * esize;
  return s0 < r1 && r0 < s1;
}

/* Checks the four arrays; fills a with the extents for the common checks. */
static weft_status_t check_v(struct weft_comm *comm, call_args *a, const size_t *const v[4]) {
  static const char *names[4] = {"sendcounts", "sdispls", "recvcounts", "rdispls"};
  char msg[200];
  for (int i = 0; i < 4; i++) {
    if (v[i] != NULL) continue;
    snprintf(msg, sizeof(msg), "%s is NULL", names[i]);
    return bad(comm, WEFT__COLL_ALL_TO_ALLV, msg);
  }
  size_t slo, rlo, total = 0;
  a->send_elems = v_extent(v[0], v[1], comm->nranks, &slo);
  a->recv_elems = v_extent(v[2], v[3], comm->nranks, &rlo);
  for (int p = 0; p < comm->nranks; p++) total = v[0][p] > SIZE_MAX - total ? SIZE_MAX : total + v[0][p];
  a->count = total;
  WEFT_TRY(check_args(comm, a));
  if (v_overlap(a->sendbuf, slo, a->send_elems, a->recvbuf, rlo, a->recv_elems, weft__dtype_size(a->dtype)))
    return bad(comm, WEFT__COLL_ALL_TO_ALLV, "the sendbuf and recvbuf extents overlap (all_to_allv is never in-place)");
  return WEFT_SUCCESS;
}

weft_status_t weft_all_to_allv(const void *sendbuf, const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                               const size_t *recvcounts, const size_t *rdispls, weft_datatype_t datatype,
                               weft_comm_t comm, weft_stream_t stream) {
  if (comm == NULL) return null_comm(WEFT__COLL_ALL_TO_ALLV);
  call_args a = {WEFT__COLL_ALL_TO_ALLV, sendbuf, recvbuf, 0, 0, 0, datatype, WEFT_SUM, -1, -1};
  const size_t *const v[4] = {sendcounts, sdispls, recvcounts, rdispls};
  WEFT_TRY(check_v(comm, &a, v));
  size_t n = (size_t)comm->nranks;
  size_t *copy = malloc(4 * n * sizeof(size_t));
  if (copy == NULL) {
    weft_status_t st = weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: all_to_allv: out of memory", comm->rank);
    if (weft__group_active()) weft__group_fail(st);
    return st;
  }
  for (int i = 0; i < 4; i++) memcpy(copy + (size_t)i * n, v[i], n * sizeof(size_t));
  weft__task *t = NULL;
  weft_status_t st = make_task(comm, &a, stream, &t);
  if (st != WEFT_SUCCESS) {
    free(copy);
    return st;
  }
  t->vcounts = copy;
  return submit(t, stream);
}

/* ---- rooted gather / scatter and the barrier ------------------------------------------- */

weft_status_t weft_gather(const void *sendbuf, void *recvbuf, size_t sendcount, weft_datatype_t datatype, int root,
                          weft_comm_t comm, weft_stream_t stream) {
  int is_root = comm != NULL && comm->rank == root;
  size_t all = comm != NULL ? times(sendcount, comm->nranks) : sendcount;
  call_args a = {WEFT__COLL_GATHER, sendbuf, recvbuf, sendcount, sendcount, is_root ? all : 0, datatype,
                 WEFT_SUM, root, -1};
  return launch(comm, &a, stream);
}

weft_status_t weft_scatter(const void *sendbuf, void *recvbuf, size_t recvcount, weft_datatype_t datatype, int root,
                           weft_comm_t comm, weft_stream_t stream) {
  int is_root = comm != NULL && comm->rank == root;
  size_t all = comm != NULL ? times(recvcount, comm->nranks) : recvcount;
  call_args a = {WEFT__COLL_SCATTER, sendbuf, recvbuf, recvcount, is_root ? all : 0, recvcount, datatype,
                 WEFT_SUM, root, -1};
  return launch(comm, &a, stream);
}

weft_status_t weft_barrier(weft_comm_t comm, weft_stream_t stream) {
  call_args a = {WEFT__COLL_BARRIER, NULL, NULL, 0, 0, 0, WEFT_UINT8, WEFT_SUM, -1, -1};
  return launch(comm, &a, stream);
}

weft_status_t weft_send(const void *sendbuf, size_t count, weft_datatype_t datatype, int peer, weft_comm_t comm,
                        weft_stream_t stream) {
  call_args a = {WEFT__COLL_SEND, sendbuf, NULL, count, count, 0, datatype, WEFT_SUM, -1, peer};
  return launch(comm, &a, stream);
}

weft_status_t weft_recv(void *recvbuf, size_t count, weft_datatype_t datatype, int peer, weft_comm_t comm,
                        weft_stream_t stream) {
  call_args a = {WEFT__COLL_RECV, NULL, recvbuf, count, 0, count, datatype, WEFT_SUM, -1, peer};
  return launch(comm, &a, stream);
}

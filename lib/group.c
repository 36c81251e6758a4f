/* group.c: grouped calls. Between weft_group_start and weft_group_end a thread's calls are
 * only recorded; at the outermost end, runs of sends and receives on one communicator become
 * a single task whose requests all progress together (so any exchange pattern is free of
 * deadlock), and collectives run in call order. */
#include <stdatomic.h>
#include <stdlib.h>
#include "lib/comm.h"
#include "lib/group.h"
#include "mem/space.h"
#include "lib/status.h"
#include "lib/stream.h"
#include "lib/stream_cuda.h"

static __thread int depth;
static __thread weft__task *head, *tail;
static __thread weft_stream_t group_stream;
static __thread int stream_set, mixed_streams;
static __thread weft_status_t group_error;

/* Threads of the process with a group open. While it is 0, no thread is in a group and
 * weft__group_active answers without reading depth: every call asks, and a thread-local
 * variable of a shared library costs a __tls_get_addr call (lib/comm.h, errors_quiet).
 * A thread's own increment is visible to itself, so a thread in a group never reads 0. */
static atomic_int threads_in_group;

int weft__group_active(void) {
  return atomic_load_explicit(&threads_in_group, memory_order_relaxed) > 0 && depth > 0;
}

void weft__group_fail(weft_status_t st) {
  if (group_error == WEFT_SUCCESS) group_error = st;
}

weft_status_t weft__group_add(weft__task *t, weft_stream_t stream) {
  if (!stream_set) {
    group_stream = stream;
    stream_set = 1;
  } else if (stream != group_stream) {
    mixed_streams = 1;
  }
  t->next = NULL;
  if (tail != NULL) tail->next = t;
  else head = t;
  tail = t;
  return WEFT_SUCCESS;
}

weft_status_t weft__launch_now(weft__task *t, weft_stream_t stream) {
  if (stream != NULL) return weft__stream_enqueue(stream, t);
  if (weft__task_on_device(t)) return weft__cuda_run_blocking(t); /* in CUDA's default stream order */
  weft_status_t st = weft__task_run(t);
  weft__task_free(t);
  return st;
}

weft_status_t weft_group_start(void) {
  if (depth++ == 0) atomic_fetch_add_explicit(&threads_in_group, 1, memory_order_relaxed);
  return WEFT_SUCCESS;
}

static int is_p2p(const weft__task *t) { return t->coll == WEFT__COLL_SEND || t->coll == WEFT__COLL_RECV; }

/* Folds the run of sends/receives starting at *cursor (same comm) into one group task, for
 * stream (NULL: run at once). On a stream the task is one the stream's thread has run and
 * kept: allocated here and freed there, every group's task crossed between the two threads'
 * heap arenas (as lib/stream.c says of tasks). */
static weft_status_t fold_p2p_run(weft__task **cursor, weft_stream_t stream, weft__task **out) {
  weft__task *first = *cursor;
  int n = 0;
  for (weft__task *t = first; t != NULL && is_p2p(t) && t->comm == first->comm; t = t->next) n++;
  weft__task *g = NULL; /* set by weft__task_new; the LTO build could not see that */
  if (stream != NULL) WEFT_TRY(weft__stream_task_new(stream, first->comm, WEFT__COLL_P2P_GROUP, &g));
  else WEFT_TRY(weft__task_new(first->comm, WEFT__COLL_P2P_GROUP, &g));
  g->p2p = n <= WEFT__TASK_P2P_INLINE ? g->p2p_inline : calloc((size_t)n, sizeof(weft__p2p_op));
  if (g->p2p == NULL) {
    weft__task_free(g);
    return weft__error(first->comm, WEFT_ERR_NO_MEMORY, "rank %d: group: out of memory", first->comm->rank);
  }
  weft__task *t = first;
  for (int i = 0; i < n; i++) {
    weft__task *next = t->next;
    size_t esize = weft_datatype_size(t->dtype);
    g->p2p[i] = (weft__p2p_op){t->coll == WEFT__COLL_SEND, t->peer,
                               t->coll == WEFT__COLL_SEND ? (void *)t->sendbuf : t->recvbuf, t->count * esize,
                               t->mem};
    if (g->mem == &weft__mem_host) g->mem = t->mem; /* the group waits on a space that may be async */
    weft__task_free(t);
    t = next;
  }
  g->np2p = n;
  g->dtype = WEFT_UINT8;
  *cursor = t;
  *out = g;
  return WEFT_SUCCESS;
}

static void free_list(weft__task *t) {
  while (t != NULL) {
    weft__task *next = t->next;
    weft__task_free(t);
    t = next;
  }
}

static weft_status_t launch_all(weft__task *list, weft_stream_t stream) {
  weft__task *cursor = list;
  while (cursor != NULL) {
    weft__task *t = cursor;
    if (is_p2p(t)) {
      weft_status_t st = fold_p2p_run(&cursor, stream, &t);
      if (st != WEFT_SUCCESS) {
        free_list(cursor);
        return st;
      }
    } else {
      cursor = t->next;
    }
    weft_status_t st = weft__launch_now(t, stream);
    if (st != WEFT_SUCCESS) {
      free_list(cursor);
      return st;
    }
  }
  return WEFT_SUCCESS;
}

weft_status_t weft_group_end(void) {
  if (depth == 0)
    return weft__error(NULL, WEFT_ERR_INVALID_USAGE, "weft_group_end without weft_group_start");
  if (--depth > 0) return WEFT_SUCCESS;
  atomic_fetch_sub_explicit(&threads_in_group, 1, memory_order_relaxed);
  weft__task *list = head;
  weft_stream_t stream = group_stream;
  weft_status_t err = group_error;
  int mixed = mixed_streams;
  head = tail = NULL;
  group_stream = NULL;
  stream_set = mixed_streams = 0;
  group_error = WEFT_SUCCESS;
  if (err != WEFT_SUCCESS || mixed) {
    free_list(list);
    if (mixed)
      return weft__error(NULL, WEFT_ERR_INVALID_USAGE, "weft_group_end: calls of one group used different streams");
    return weft__error(NULL, err, "weft_group_end: a call in the group failed (%s); the group was discarded",
                       weft_get_error_string(err));
  }
  return launch_all(list, stream);
}

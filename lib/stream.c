/* stream.c: streams, ordered queues of operations run by one progress thread each.
 *
 * The thread sleeps on a condition variable while its queue is empty (no CPU burned by an
 * idle stream) and runs queued operations back to back, so a burst of enqueued calls pays
 * the wake-up once. A wake-up costs ~30 us on the 2-core VM, more than a small collective,
 * so before sleeping both the thread (queue empty) and weft_stream_synchronize (work
 * outstanding) look again for a bounded time (STREAM_SPIN_NS, shorter with more ranks than
 * cores), yielding the CPU between looks so the thread they wait for can run on their core.
 * Errors are kept until the next synchronize and also become the communicator's async
 * error. */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "lib/comm.h"
#include "lib/log.h"
#include "lib/status.h"
#include "lib/clock.h"
#include "lib/stream.h"
#include "lib/stream_cuda.h"
#include "lib/task.h"
#include "topo/topo.h"

#define STREAM_SPIN_NS 50000ull        /* look again for 50 us before sleeping */
#define STREAM_SPIN_OVERSUB_NS 10000ull /* 10 us with more ranks than cores */
/* At most this many calls wait in a stream's queue; the caller of one more waits until the
 * thread has worked it down to half, as a CUDA launch waits when its stream's queue is full
 * (NCCL's enqueue inherits that bound). Unbounded, a loop enqueueing small calls faster
 * than they run (nccl-tests' -z 0 timed loop: enqueue every iteration, synchronize once)
 * grew the queue by up to a million tasks a second, ~100 MB/s of heap per rank, and each
 * new heap page cost the caller a page fault (perf of 2-rank 8-byte broadcasts: clear_page
 * 52% of both ranks' samples). Bounded: 8-64 B broadcasts 0.4-0.6 us a call against
 * 0.8-1.3, peak RSS ~8 MB. */
#define STREAM_QUEUE_MAX 1024
/* Tasks the thread has run are kept for the stream's next calls (weft__stream_task_new), at
 * most this many (~0.7 MB per stream at the most): a task allocated by the caller's thread
 * and freed by the stream's made glibc's allocator move every one between the two threads'
 * heaps. perf of 2-rank 8-byte broadcasts on a stream (nccl-tests' -z 0 loop): the root's
 * stream thread spent 16% of its samples in free()'s chunk consolidation (unlink_chunk) and
 * both threads 3-4% more in malloc and free. The bound covers a full queue. */
#define STREAM_SPARE_MAX STREAM_QUEUE_MAX

struct weft_stream {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t work;   /* signalled when a task is queued or the stream stops */
  pthread_cond_t idle;   /* signalled when the queue drains */
  pthread_cond_t room;   /* broadcast when the queue is down to half and callers wait for room */
  int room_waiters;      /* callers waiting for room (under mu) */
  weft__task *head, *tail;
  weft__task *spare;     /* run tasks kept for reuse, linked by next (under mu) */
  int nspare;
  int busy, stop;
  weft_status_t error;   /* first error since the last synchronize */
  atomic_int queued;     /* tasks in the queue (read without the lock while spinning) */
  atomic_int outstanding; /* tasks enqueued and not finished */
  atomic_int oversubscribed; /* the last task's communicator had more ranks than cores */
  struct weft__cuda_binding *cuda; /* the CUDA stream it runs in the order of, or NULL */
};

/* Looks up to a bounded time for *word != 0 (want_nonzero) or == 0, yielding between looks.
 * Returns whether it saw it; the caller then takes the lock and checks for real. */
static int spin_for(weft_stream_t s, atomic_int *word, int want_nonzero) {
  uint64_t limit = atomic_load_explicit(&s->oversubscribed, memory_order_relaxed)
                       ? STREAM_SPIN_OVERSUB_NS : STREAM_SPIN_NS;
  uint64_t start = weft__now_ns();
  for (unsigned i = 0;; i++) {
    if ((atomic_load_explicit(word, memory_order_acquire) != 0) == want_nonzero) return 1;
    if (i % 16 == 15 && weft__now_ns() - start > limit) return 0;
    if (i < 32) __builtin_ia32_pause();
    else sched_yield();
  }
}

static void record(weft_stream_t s, weft__task *t, weft_status_t st) {
  if (st == WEFT_SUCCESS) return;
  int expected = WEFT_SUCCESS;
  atomic_compare_exchange_strong(&t->comm->async_error, &expected, (int)st);
  pthread_mutex_lock(&s->mu);
  if (s->error == WEFT_SUCCESS) s->error = st;
  pthread_mutex_unlock(&s->mu);
}

static void *stream_main(void *arg) {
  weft_stream_t s = arg;
  const struct weft_comm *placed = NULL; /* the comm whose rank's CPUs this thread is pinned to */
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (s->head == NULL && !s->stop) {
      pthread_mutex_unlock(&s->mu);
      spin_for(s, &s->queued, 1);
      pthread_mutex_lock(&s->mu);
    }
    while (s->head == NULL && !s->stop) pthread_cond_wait(&s->work, &s->mu);
    if (s->head == NULL) break;
    weft__task *t = s->head;
    s->head = t->next;
    if (s->head == NULL) s->tail = NULL;
    atomic_fetch_sub(&s->queued, 1);
    /* Half empty before a waiting caller wakes: one wake-up (a futex call for this thread,
     * a context switch where both share a core) per STREAM_QUEUE_MAX / 2 tasks, not per task. */
    if (s->room_waiters > 0 && atomic_load_explicit(&s->queued, memory_order_relaxed) <= STREAM_QUEUE_MAX / 2)
      pthread_cond_broadcast(&s->room);
    s->busy = 1;
    pthread_mutex_unlock(&s->mu);
    struct weft_comm *comm = t->comm;
    /* Near the rank's memory and NIC (topo/comm_topo.c); a stream may serve several comms. */
    if (comm != placed) placed = comm, weft__topo_place_thread(comm);
    /* Log lines from this thread carry the rank, as the caller's do: tests and users match
     * "[rank] weft INFO tuner: ..." whichever thread ran the call. */
    weft__log_set_rank(comm->rank);
    atomic_store_explicit(&s->oversubscribed, comm->oversubscribed, memory_order_relaxed);
#ifdef WEFT_HAVE_CUDA
    if (s->cuda != NULL) {
      weft_status_t st = weft__cuda_task_begin(s->cuda, t);
      if (st == WEFT_SUCCESS) st = weft__task_run(t);
      record(s, t, weft__cuda_task_end(s->cuda, t, st));
    } else
#endif
      record(s, t, weft__task_run(t));
    weft__task_release(t);
    atomic_fetch_sub(&comm->pending, 1);
    pthread_mutex_lock(&s->mu);
    if (s->nspare < STREAM_SPARE_MAX) {
      t->next = s->spare;
      s->spare = t;
      s->nspare++;
    } else {
      free(t);
    }
    s->busy = 0;
    atomic_fetch_sub(&s->outstanding, 1);
    if (s->head == NULL) pthread_cond_broadcast(&s->idle);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

weft_status_t weft__stream_create_bound(weft_stream_t *stream, struct weft__cuda_binding *cuda) {
  if (stream == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_stream_create: stream is NULL");
  weft_stream_t s = calloc(1, sizeof(*s));
  if (s == NULL) return weft__error(NULL, WEFT_ERR_NO_MEMORY, "weft_stream_create: out of memory");
  s->cuda = cuda;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->idle, NULL);
  pthread_cond_init(&s->room, NULL);
  int rc = pthread_create(&s->thread, NULL, stream_main, s);
  if (rc != 0) {
    free(s);
    return weft__error(NULL, WEFT_ERR_SYSTEM, "weft_stream_create: cannot start its thread: %s", strerror(rc));
  }
  *stream = s;
  return WEFT_SUCCESS;
}

weft_status_t weft_stream_create(weft_stream_t *stream) { return weft__stream_create_bound(stream, NULL); }

weft_status_t weft__stream_task_new(weft_stream_t s, struct weft_comm *comm, weft__coll_t coll, weft__task **out) {
  pthread_mutex_lock(&s->mu);
  weft__task *t = s->spare;
  if (t != NULL) {
    s->spare = t->next;
    s->nspare--;
  }
  pthread_mutex_unlock(&s->mu);
  if (t == NULL) return weft__task_new(comm, coll, out);
  weft__task_init(t, comm, coll);
  *out = t;
  return WEFT_SUCCESS;
}

weft_status_t weft__stream_enqueue(weft_stream_t s, weft__task *t) {
#ifdef WEFT_HAVE_CUDA
  if (s->cuda != NULL) return weft__cuda_enqueue(s, s->cuda, t);
#endif
  weft__stream_push(s, t);
  return WEFT_SUCCESS;
}

void weft__stream_push(weft_stream_t s, weft__task *t) {
  atomic_fetch_add(&t->comm->pending, 1);
  t->next = NULL;
  pthread_mutex_lock(&s->mu);
  /* The wait is bounded: the thread takes the next task as soon as the one it runs ends, and
   * every task ends by the communicator's timeout. */
  while (atomic_load_explicit(&s->queued, memory_order_relaxed) >= STREAM_QUEUE_MAX) {
    s->room_waiters++;
    pthread_cond_wait(&s->room, &s->mu);
    s->room_waiters--;
  }
  if (s->tail != NULL) s->tail->next = t;
  else s->head = t;
  s->tail = t;
  atomic_fetch_add(&s->outstanding, 1);
  atomic_fetch_add(&s->queued, 1);
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
}

weft_status_t weft_stream_synchronize(weft_stream_t s) {
  if (s == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_stream_synchronize: stream is NULL");
  spin_for(s, &s->outstanding, 0);
  pthread_mutex_lock(&s->mu);
  while (s->head != NULL || s->busy) pthread_cond_wait(&s->idle, &s->mu);
  weft_status_t st = s->error;
  s->error = WEFT_SUCCESS;
  pthread_mutex_unlock(&s->mu);
  return st;
}

weft_status_t weft_stream_query(weft_stream_t s) {
  if (s == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_stream_query: stream is NULL");
  pthread_mutex_lock(&s->mu);
  weft_status_t st = (s->head != NULL || s->busy) ? WEFT_IN_PROGRESS : s->error;
  if (st != WEFT_IN_PROGRESS) s->error = WEFT_SUCCESS;
  pthread_mutex_unlock(&s->mu);
  return st;
}

weft_status_t weft_stream_destroy(weft_stream_t s) {
  if (s == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_stream_destroy: stream is NULL");
  weft_status_t st = weft_stream_synchronize(s);
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  while (s->spare != NULL) {
    weft__task *t = s->spare;
    s->spare = t->next;
    free(t);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->work);
  pthread_cond_destroy(&s->idle);
  pthread_cond_destroy(&s->room);
#ifdef WEFT_HAVE_CUDA
  if (s->cuda != NULL) weft__cuda_binding_free(s->cuda);
#endif
  free(s);
  return st;
}

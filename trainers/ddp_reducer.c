/* trainers/ddp_reducer.c: gradient buckets, their in-place WEFT_AVG all-reduce on a
 * stream, and the stream's busy-time watcher; see ddp_reducer.h. */
#include "trainers/ddp_reducer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainers/metrics.h"

/* Walks the tensors from the last to the first, closing a bucket once it holds at least
 * its cap (so a bucket may pass the cap by one tensor, as PyTorch's do). */
static int plan_buckets(ddp_reducer *r, const gpt_layout *lay, size_t cap, size_t first_cap) {
  r->buckets = calloc((size_t)lay->ntensors + 1, sizeof(ddp_bucket));
  if (!r->buckets) return -1;
  size_t hi = lay->total, bytes = 0, limit = first_cap;
  for (int t = lay->ntensors - 1; t >= 0; t--) {
    bytes += lay->tensors[t].size * sizeof(float);
    if (bytes < limit || t == 0) continue;
    r->buckets[r->nbuckets++] = (ddp_bucket){lay->tensors[t].offset, hi};
    hi = lay->tensors[t].offset;
    bytes = 0;
    limit = cap;
  }
  if (hi > 0) r->buckets[r->nbuckets++] = (ddp_bucket){0, hi};
  return 0;
}

/* Sleeps in weft_stream_synchronize while the stream has work and notes when it drains. */
static void *watch(void *arg) {
  ddp_reducer *r = arg;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (r->enqueued == r->drained && !r->stop) pthread_cond_wait(&r->cv, &r->mu);
    if (r->enqueued == r->drained) break;
    long target = r->enqueued;
    pthread_mutex_unlock(&r->mu);
    weft_status_t st = weft_stream_synchronize(r->stream);
    double t = gpt_now_s();
    pthread_mutex_lock(&r->mu);
    if (st != WEFT_SUCCESS && r->error == WEFT_SUCCESS) r->error = st;
    r->drained = target;
    if (r->drained == r->enqueued) r->busy_s += t - r->busy_since;
    pthread_cond_broadcast(&r->cv);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

int ddp_reducer_init(ddp_reducer *r, const gpt_layout *lay, float *grads, size_t cap, size_t first_cap,
                     weft_comm_t comm, char *err, size_t errlen) {
  memset(r, 0, sizeof(*r));
  r->comm = comm;
  r->grads = grads;
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  if (plan_buckets(r, lay, cap, first_cap)) {
    snprintf(err, errlen, "out of memory for the bucket table");
    return -1;
  }
  weft_status_t st = weft_stream_create(&r->stream);
  if (st != WEFT_SUCCESS) {
    snprintf(err, errlen, "weft_stream_create: %s", weft_get_last_error(NULL));
    return -1;
  }
  if (pthread_create(&r->watcher, NULL, watch, r)) {
    snprintf(err, errlen, "cannot start the comm watcher thread");
    return -1;
  }
  r->watcher_started = 1;
  return 0;
}

void ddp_reducer_free(ddp_reducer *r) {
  if (r->watcher_started) {
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->watcher, NULL);
  }
  if (r->stream) weft_stream_destroy(r->stream);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r->buckets);
  memset(r, 0, sizeof(*r));
}

void ddp_reducer_begin(ddp_reducer *r) {
  pthread_mutex_lock(&r->mu);
  r->next = 0;
  r->busy_s = 0.0;
  pthread_mutex_unlock(&r->mu);
}

static weft_status_t launch(ddp_reducer *r, const ddp_bucket *b) {
  pthread_mutex_lock(&r->mu);
  if (r->enqueued == r->drained) r->busy_since = gpt_now_s();
  pthread_mutex_unlock(&r->mu);
  float *g = r->grads + b->lo;
  weft_status_t st = weft_all_reduce(g, g, b->hi - b->lo, WEFT_FLOAT32, WEFT_AVG, r->comm, r->stream);
  if (st != WEFT_SUCCESS) return st;
  pthread_mutex_lock(&r->mu);
  r->enqueued++;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  return WEFT_SUCCESS;
}

weft_status_t ddp_reducer_ready_from(ddp_reducer *r, size_t lo) {
  while (r->next < r->nbuckets && r->buckets[r->next].lo >= lo) {
    weft_status_t st = launch(r, &r->buckets[r->next]);
    if (st != WEFT_SUCCESS) return st;
    r->next++;
  }
  return WEFT_SUCCESS;
}

weft_status_t ddp_reducer_wait(ddp_reducer *r, double *exposed_s, double *comm_s) {
  double t0 = gpt_now_s();
  pthread_mutex_lock(&r->mu);
  while (r->drained != r->enqueued) pthread_cond_wait(&r->cv, &r->mu);
  weft_status_t st = r->error;
  r->error = WEFT_SUCCESS;
  *comm_s = r->busy_s;
  pthread_mutex_unlock(&r->mu);
  *exposed_s = gpt_now_s() - t0;
  return st;
}

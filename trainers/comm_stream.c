/* trainers/comm_stream.c: a weft stream with a busy-time watcher; see comm_stream.h. */
#include "trainers/comm_stream.h"

#include <stdio.h>
#include <string.h>

#include "trainers/metrics.h"

/* Sleeps in weft_stream_synchronize while the stream has work and notes when it drains. */
static void *watch(void *arg) {
  gpt_comm_stream *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (s->enqueued == s->drained && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    if (s->enqueued == s->drained) break;
    long target = s->enqueued;
    pthread_mutex_unlock(&s->mu);
    weft_status_t st = weft_stream_synchronize(s->stream);
    double t = gpt_now_s();
    pthread_mutex_lock(&s->mu);
    if (st != WEFT_SUCCESS && s->error == WEFT_SUCCESS) s->error = st;
    s->drained = target;
    if (s->drained == s->enqueued) s->busy_s += t - s->busy_since;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int gpt_comm_stream_init(gpt_comm_stream *s, char *err, size_t errlen) {
  memset(s, 0, sizeof(*s));
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (weft_stream_create(&s->stream) != WEFT_SUCCESS) {
    snprintf(err, errlen, "weft_stream_create: %s", weft_get_last_error(NULL));
    s->stream = NULL;
    return -1;
  }
  if (pthread_create(&s->watcher, NULL, watch, s)) {
    snprintf(err, errlen, "cannot start the comm watcher thread");
    return -1;
  }
  s->watcher_started = 1;
  return 0;
}

void gpt_comm_stream_free(gpt_comm_stream *s) {
  if (s->watcher_started) {
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->watcher, NULL);
  }
  if (s->stream) weft_stream_destroy(s->stream);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  memset(s, 0, sizeof(*s));
}

void gpt_comm_stream_begin_op(gpt_comm_stream *s) {
  pthread_mutex_lock(&s->mu);
  if (s->enqueued == s->drained) s->busy_since = gpt_now_s();
  pthread_mutex_unlock(&s->mu);
}

void gpt_comm_stream_enqueued(gpt_comm_stream *s) {
  pthread_mutex_lock(&s->mu);
  s->enqueued++;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

weft_status_t gpt_comm_stream_wait(gpt_comm_stream *s) {
  double t0 = gpt_now_s();
  pthread_mutex_lock(&s->mu);
  while (s->drained != s->enqueued) pthread_cond_wait(&s->cv, &s->mu);
  weft_status_t st = s->error;
  s->error = WEFT_SUCCESS;
  s->exposed_s += gpt_now_s() - t0;
  pthread_mutex_unlock(&s->mu);
  return st;
}

void gpt_comm_stream_take_times(gpt_comm_stream *s, double *busy_s, double *exposed_s) {
  pthread_mutex_lock(&s->mu);
  *busy_s = s->busy_s;
  *exposed_s = s->exposed_s;
  s->busy_s = s->exposed_s = 0.0;
  pthread_mutex_unlock(&s->mu);
}

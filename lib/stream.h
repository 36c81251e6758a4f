/* stream.h: handing tasks to a stream's progress thread. */
#ifndef WEFT_STREAM_H
#define WEFT_STREAM_H
#include "weft.h"
#include "lib/task.h"

struct weft__cuda_binding;

/* A new task for a call that will be queued on s (weft__stream_enqueue): one the stream's
 * thread has run and kept, else weft__task_new's. Errors as weft__task_new's. Thread-safe. */
weft_status_t weft__stream_task_new(weft_stream_t s, struct weft_comm *comm, weft__coll_t coll, weft__task **out);
/* Queues t on s; the stream's thread runs and frees it. Counts it in t->comm->pending. On
 * a stream bound to a CUDA stream, in that stream's order (lib/stream_cuda.h), which can
 * fail: then t is freed and the error returned. */
weft_status_t weft__stream_enqueue(weft_stream_t s, weft__task *t);
/* Queues t on s, nothing else (weft__stream_enqueue's last step). */
void weft__stream_push(weft_stream_t s, weft__task *t);
/* A new stream; bound to cuda (owned by the stream from now on) when not NULL. Errors as
 * weft_stream_create's. */
weft_status_t weft__stream_create_bound(weft_stream_t *stream, struct weft__cuda_binding *cuda);
#endif

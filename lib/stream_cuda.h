/* stream_cuda.h: weft streams bound to a CUDA stream (weft_stream_create_cuda), and calls
 * on device buffers (lib/stream_cuda.c; built with --with-cuda, stubs otherwise).
 *
 * A call queued on such a stream runs in the CUDA stream's order without the calling thread
 * waiting: the caller records an event on the CUDA stream and then makes the stream wait
 * (a stream memory operation) until weft's progress thread writes the call's ticket into
 * pinned host memory; the thread waits for the event before it starts the call. Device
 * buffers are staged: copied to pinned host memory on the CUDA stream before the event, run
 * there by the host algorithms, copied back after the wait. */
#ifndef WEFT_STREAM_CUDA_H
#define WEFT_STREAM_CUDA_H
#include "weft.h"
#include "lib/task.h"
#include "mem/space.h"

struct weft__cuda_binding;

static inline int weft__task_on_device(const weft__task *t) { return t->mem->kind == WEFT__MEM_CUDA; }

#ifdef WEFT_HAVE_CUDA
/* Caller's thread: queues t on s, bound by b, in the CUDA stream's order; takes t. Errors:
 * WEFT_ERR_SYSTEM (a CUDA call failed; t is freed and nothing was queued),
 * WEFT_ERR_NO_MEMORY. */
weft_status_t weft__cuda_enqueue(weft_stream_t s, struct weft__cuda_binding *b, weft__task *t);
/* Stream thread, before running t: until the CUDA stream reached the call. */
weft_status_t weft__cuda_task_begin(struct weft__cuda_binding *b, weft__task *t);
/* Stream thread, after running t with status st: lets the CUDA stream go on (always, even
 * after an error, so no GPU stream waits forever) and returns st, or the CUDA error of the
 * device operations when st was a success. */
weft_status_t weft__cuda_task_end(struct weft__cuda_binding *b, weft__task *t, weft_status_t st);
/* Stream thread, in the direct driver (algos/direct.c): 1 when t's share of the direct
 * collective was queued on the caller's CUDA stream at enqueue (WEFT_CUDA_DIRECT=2). */
int weft__cuda_direct_queued(const weft__task *t);
/* Stream thread, in place of t's direct work once every rank is in the call: checks that
 * every rank's buffers (in[j], out[j] as mapped here) are where the queued kernels assumed,
 * lets them run and waits until they have. Errors: WEFT_ERR_INVALID_USAGE naming the peer
 * (the kernels then write nothing), WEFT_ERR_SYSTEM (CUDA), WEFT_ERR_ABORTED. */
weft_status_t weft__cuda_direct_release(weft__task *t, char *const *in, char *const *out);
/* Frees b (the stream is idle). */
void weft__cuda_binding_free(struct weft__cuda_binding *b);
/* A call on device buffers without a stream: runs in the order of CUDA's legacy default
 * stream and returns when it is complete there. Takes t. */
weft_status_t weft__cuda_run_blocking(weft__task *t);
#else
static inline int weft__cuda_direct_queued(const weft__task *t) { return 0; }
static inline weft_status_t weft__cuda_direct_release(weft__task *t, char *const *in, char *const *out) {
  return WEFT_ERR_UNSUPPORTED; /* unreachable: nothing is queued without CUDA */
}
static inline weft_status_t weft__cuda_run_blocking(weft__task *t) {
  weft__task_free(t); /* unreachable: no space has device memory without CUDA */
  return WEFT_ERR_UNSUPPORTED;
}
#endif
#endif

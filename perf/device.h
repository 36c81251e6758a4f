/*
 * device.h: the perf programs' device buffers (-B, perf/options.c): CUDA memory on the
 * rank's GPU, a CUDA stream bound to a weft stream (weft_stream_create_cuda), and the copies
 * the data checks need. As nccl-tests, the buffers of a build with CUDA are on the GPU when
 * there is one (-B auto), on the host with -B host. Built with CUDA (WEFT_HAVE_CUDA); without
 * it perf_dev_open says there is no device and the rest is never called.
 * Every function returns 0 on success, else -1 with the CUDA error's text in perf_dev_error().
 * One thread (the perf program's main thread).
 */
#ifndef WEFT_PERF_DEVICE_H
#define WEFT_PERF_DEVICE_H
#include <stddef.h>
#include "weft.h"

/* Picks the device of the local rank (local_rank modulo the device count: several ranks may
 * share one GPU, which NCCL refuses and weft allows) and describes it in desc ("[0000:19:00]
 * NVIDIA H200"); *device gets its ordinal. -1 where no device is usable (why in
 * perf_dev_error()). */
int perf_dev_open(int local_rank, int *device, char *desc, size_t len);
/* bytes of device memory, set to 0: cudaMalloc's, or with from_weft weft_mem_alloc_device's
 * (to register as a window, -R 2; freed with weft_mem_free). */
int perf_dev_alloc(void **p, size_t bytes, int from_weft);
void perf_dev_free(void *p);
/* n bytes between host and device, either way (cudaMemcpy: complete on return). */
int perf_dev_copy(void *dst, const void *src, size_t n);
/* A non-blocking CUDA stream and *ws, a weft stream in its order. */
int perf_dev_stream_create(weft_stream_t *ws);
/* Everything queued on that stream has completed (after the weft stream's calls return). */
int perf_dev_stream_sync(void);
void perf_dev_stream_destroy(weft_stream_t ws);
const char *perf_dev_error(void);
#endif

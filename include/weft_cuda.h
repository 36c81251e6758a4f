/* weft_cuda.h: weft on CUDA device buffers (libweft built with --with-cuda; weft.pc's
 * cflags find it). Include it after the CUDA runtime's header:
 *
 *   #include <cuda_runtime_api.h>
 *   #include <weft.h>
 *   #include <weft_cuda.h>
 *   cudaStream_t cs;  cudaStreamCreate(&cs);
 *   weft_stream_t s;  weft_stream_create_cuda(&s, cs);
 *   weft_all_reduce(dev_in, dev_out, count, WEFT_FLOAT32, WEFT_SUM, comm, s);  // returns at once
 *   my_kernel<<<g, b, 0, cs>>>(dev_out);  // runs after the all-reduce, no host wait between
 *
 * Every collective and point-to-point call takes device pointers (cudaMalloc memory, the
 * memory of PyTorch's allocator, weft_mem_alloc_device) as it takes host pointers. On a
 * weft stream made from a cudaStream_t the call is queued in that CUDA stream's order, as
 * ncclAllReduce is: work queued on the CUDA stream before the call completes before the
 * call reads its buffers, work queued after it waits for the call, and the calling thread
 * never waits for the GPU. Its errors surface in weft_stream_synchronize (which waits for
 * weft's part of the queued calls, not for the CUDA stream) and in
 * weft_comm_get_async_error. A call on device buffers with a NULL stream runs in the order
 * of CUDA's legacy default stream and returns once it is complete there.
 *
 * Calls on device buffers are staged through pinned host memory (a copy each way on the
 * CUDA stream) and run weft's host algorithms over shared memory or TCP, so device buffers
 * also cross hosts. Peers reading each other's device buffers in place (CUDA IPC) is not
 * enabled yet: large calls move at host-copy speed, not at the GPU's.
 *
 * Device pointers are recognised once the process armed CUDA: weft_stream_create_cuda,
 * weft_mem_alloc_device or weft_cuda_enable (until then every pointer is host memory, and
 * a host-only program never initializes CUDA). */
#ifndef WEFT_CUDA_H
#define WEFT_CUDA_H
#include <stddef.h>
#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * weft_stream_create_cuda: a weft stream whose calls run in the order of cuda_stream (any
 * stream of the current device, cudaStreamLegacy or cudaStreamPerThread included); the
 * current device is the one its calls use. Destroy it with weft_stream_destroy before
 * destroying cuda_stream. Uses 16 pinned staging buffers (1 MiB each until a larger staged
 * call grows one) and one thread.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (stream NULL), WEFT_ERR_UNSUPPORTED (no CUDA device,
 * or a driver without stream memory operations), WEFT_ERR_SYSTEM (a CUDA call failed: the
 * message names it), WEFT_ERR_NO_MEMORY. Thread-safe.
 */
WEFT_API weft_status_t weft_stream_create_cuda(weft_stream_t *stream, cudaStream_t cuda_stream);

/*
 * weft_mem_alloc_device: *ptr = size bytes of device memory on the current device
 * (cudaMalloc), which weft_comm_window_register accepts; free it with weft_mem_free.
 * Arms CUDA (above). size: bytes, > 0.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (ptr NULL, size 0), WEFT_ERR_UNSUPPORTED (no CUDA
 * device), WEFT_ERR_NO_MEMORY, WEFT_ERR_SYSTEM. Thread-safe.
 */
WEFT_API weft_status_t weft_mem_alloc_device(void **ptr, size_t size);

/*
 * weft_cuda_enable: from now on weft asks whether a call's pointers are device memory
 * (about a microsecond per buffer). For programs that pass device pointers to blocking
 * calls without making a CUDA weft stream first.
 * Errors: WEFT_ERR_UNSUPPORTED (no CUDA device). Thread-safe.
 */
WEFT_API weft_status_t weft_cuda_enable(void);

#ifdef __cplusplus
}
#endif
#endif

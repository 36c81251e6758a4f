/* cuda.h: the CUDA device memory space (mem/cuda.c), built with --with-cuda.
 *
 * Device memory of this process (cudaMalloc, PyTorch's allocator, weft_mem_alloc_device)
 * and peers' device memory mapped through CUDA IPC. Operations are copy-engine copies and
 * the kernels of mem/cuda_kernels.cu, queued on the calling thread's own CUDA stream
 * (one per thread and device, created on first use); weft__mem_wait synchronizes it.
 * Pointers: device pointers, or host memory the GPU can reach (pinned memory, reached
 * through unified addressing); copies take any host memory. The space recognises device
 * pointers only once armed (weft__cuda_arm: a CUDA weft stream, device memory from weft,
 * or the NCCL library's init), so a host-only program never initializes CUDA. */
#ifndef WEFT_MEM_CUDA_H
#define WEFT_MEM_CUDA_H
#include <stddef.h>
#include "weft.h"
#include "mem/space.h"

extern const weft__mem_space weft__mem_cuda;

/* 1 when a CUDA device is usable here; else 0 with why ("no CUDA device: ..."). Thread-safe. */
int weft__cuda_usable(char *why, size_t len);
/* From now on, pointers are asked whether they are device memory (mem/spaces.c). Idempotent,
 * thread-safe. */
void weft__cuda_arm(void);
/* The first CUDA failure of this thread's space operations since the last call, as a weft
 * status (WEFT_SUCCESS when none), with its text in msg. Clears it. */
weft_status_t weft__cuda_take_error(char *msg, size_t len);
/* The driver API function called name (its CUDA 12.0 ABI), reached through the runtime so
 * libweft links no libcuda; NULL when the driver lacks it. Thread-safe. */
void *weft__cuda_driver_entry(const char *name);
/* The calling thread's CUDA stream of the space (a cudaStream_t), created on first use on
 * the thread's current device; NULL when it cannot be created. */
void *weft__cuda_thread_stream(void);
/* Makes stream (a cudaStream_t of device) the calling thread's stream of the space from now
 * on: a weft stream's thread takes the one its binding created up front, since creating a
 * stream in the middle of a call, while the caller's stream waits for it, is one more CUDA
 * call that might wait for that stream (tests/gpu/cuda_wait_probe asks). */
void weft__cuda_use_thread_stream(void *stream, int device);
#endif

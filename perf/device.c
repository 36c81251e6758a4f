/*
 * device.c: the perf programs' device buffers (perf/device.h).
 */
#include <stdio.h>
#include "perf/device.h"

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "weft_cuda.h"

static char last_error[200];
static cudaStream_t stream;

static int fail(cudaError_t e, const char *what) {
  cudaGetLastError();
  snprintf(last_error, sizeof(last_error), "%s: %s", what, cudaGetErrorString(e));
  return -1;
}
#define TRY(call, what)                         \
  do {                                          \
    cudaError_t e_ = (call);                    \
    if (e_ != cudaSuccess) return fail(e_, what); \
  } while (0)

int perf_dev_open(int local_rank, int *device, char *desc, size_t len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return fail(e, "no CUDA device");
  if (n == 0) {
    snprintf(last_error, sizeof(last_error), "no CUDA device (the driver reports none)");
    return -1;
  }
  *device = (local_rank < 0 ? 0 : local_rank) % n;
  TRY(cudaSetDevice(*device), "cudaSetDevice");
  struct cudaDeviceProp prop;
  char bus[32] = "?";
  TRY(cudaGetDeviceProperties(&prop, *device), "cudaGetDeviceProperties");
  if (cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), *device) != cudaSuccess) cudaGetLastError();
  snprintf(desc, len, "[%s] %s", bus, prop.name);
  /* weft recognises device pointers once armed: blocking calls (-z, -y, -L) need it too */
  if (weft_cuda_enable() != WEFT_SUCCESS) {
    snprintf(last_error, sizeof(last_error), "weft_cuda_enable: %s", weft_get_last_error(NULL));
    return -1;
  }
  return 0;
}

int perf_dev_alloc(void **p, size_t bytes, int from_weft) {
  if (from_weft && weft_mem_alloc_device(p, bytes) != WEFT_SUCCESS) {
    snprintf(last_error, sizeof(last_error), "weft_mem_alloc_device: %s", weft_get_last_error(NULL));
    return -1;
  }
  if (!from_weft) TRY(cudaMalloc(p, bytes), "cudaMalloc of a benchmark buffer");
  TRY(cudaMemset(*p, 0, bytes), "cudaMemset");
  TRY(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return 0;
}

void perf_dev_free(void *p) {
  if (p != NULL && cudaFree(p) != cudaSuccess) cudaGetLastError();
}

int perf_dev_copy(void *dst, const void *src, size_t n) {
  TRY(cudaMemcpy(dst, src, n, cudaMemcpyDefault), "cudaMemcpy (data check)");
  /* From pageable memory cudaMemcpy may return before the data reached the device, and the
   * collective's stream does not wait for the legacy stream (it is non-blocking): without
   * this, a call read the last iteration's data (seen on the H200: in-place all-reduce at
   * 2 KiB and 32 KiB wrong, -B device) */
  TRY(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize (data check)");
  return 0;
}

int perf_dev_stream_create(weft_stream_t *ws) {
  TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  if (weft_stream_create_cuda(ws, stream) != WEFT_SUCCESS) {
    snprintf(last_error, sizeof(last_error), "weft_stream_create_cuda: %s", weft_get_last_error(NULL));
    return -1;
  }
  return 0;
}

int perf_dev_stream_sync(void) {
  /* the stream, and the legacy default stream of blocking calls (-z, -y, -L) */
  if (stream != NULL) TRY(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  TRY(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
  return 0;
}

void perf_dev_stream_destroy(weft_stream_t ws) {
  if (ws != NULL) weft_stream_destroy(ws);
  if (stream != NULL && cudaStreamDestroy(stream) != cudaSuccess) cudaGetLastError();
  stream = NULL;
}

const char *perf_dev_error(void) { return last_error; }

#else /* no CUDA in this build */

int perf_dev_open(int local_rank, int *device, char *desc, size_t len) { return -1; }
int perf_dev_alloc(void **p, size_t bytes, int from_weft) { return -1; }
void perf_dev_free(void *p) {}
int perf_dev_copy(void *dst, const void *src, size_t n) { return -1; }
int perf_dev_stream_create(weft_stream_t *ws) { return -1; }
int perf_dev_stream_sync(void) { return -1; }
void perf_dev_stream_destroy(weft_stream_t ws) {}
const char *perf_dev_error(void) { return "weft was built without CUDA (./configure found no toolkit)"; }
#endif

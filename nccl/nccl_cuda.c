/* nccl_cuda.c: libnccl.so.2 on CUDA (weft built with the CUDA toolkit): the caller's
 * cudaStream_t bound to a weft stream, device pointers handed to weft, ncclMemAlloc's device
 * memory and PreMulSum's scaling on the device. Without WEFT_HAVE_CUDA every function here
 * says "no CUDA" and the library keeps its host-only contract.
 *
 * CUDA is looked at only when a program gives a reason: a stream argument that is not NULL,
 * cudaStreamLegacy, cudaStreamPerThread or a weft stream; ncclMemAlloc; or, until a device
 * pointer was seen once, a buffer that cudaPointerGetAttributes is asked about (on a machine
 * with a device). A host-only program on a machine without a device never initializes CUDA
 * beyond one cudaGetDeviceCount. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nccl/nccl_internal.h"

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include "weft_cuda.h"

/* nccl_kernels.cu: dst[i] = src[i] * scalar on stream (scalar: one element of dt, read on
 * the device from scalar_dev when not NULL, else the value in scalar_host). */
int weft__nccl_scale(void *dst, const void *src, size_t count, int dt, const void *scalar_dev,
                     const void *scalar_host, cudaStream_t stream);
/* nccl_kernels.cu: loads that kernel into the current device's context; 0 or a cudaError_t. */
int weft__nccl_kernels_load(void);

/* ---- is there a device ------------------------------------------------------------------ */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int ndevices;
static char no_device_why[160];

static void probe(void) {
  cudaError_t e = cudaGetDeviceCount(&ndevices);
  if (e != cudaSuccess) {
    cudaGetLastError();
    ndevices = 0;
    snprintf(no_device_why, sizeof no_device_why, "no CUDA device (%s)", cudaGetErrorString(e));
  } else if (ndevices == 0) {
    snprintf(no_device_why, sizeof no_device_why, "no CUDA device (the driver reports none)");
  }
}

int nccl__cuda_present(void) {
  pthread_once(&probe_once, probe);
  return ndevices > 0;
}

/* weft recognises device pointers once CUDA is armed; arming costs weft one pointer query
 * per buffer from then on, so it waits for a first device pointer or a real CUDA stream. */
static atomic_int armed;

static void arm(void) {
  if (atomic_load_explicit(&armed, memory_order_relaxed)) return;
  if (weft_cuda_enable() == WEFT_SUCCESS) atomic_store(&armed, 1);
}

static int is_device_pointer(const void *p) {
  if (p == NULL || !nccl__cuda_present()) return 0;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

void nccl__cuda_see(const void *a, const void *b) {
  if (atomic_load_explicit(&armed, memory_order_relaxed)) return;
  if (is_device_pointer(a) || is_device_pointer(b)) arm();
}

/* ---- the caller's cudaStream_t --------------------------------------------------------------- */

/* One weft stream per (cudaStream_t value, current device), made on first use and kept for
 * the life of the process. Caching by handle value is safe: a weft stream bound to a CUDA
 * stream keeps only the handle and per-device resources (events, pinned staging), and at each
 * call records and waits on whatever stream the handle names then. If the program destroys
 * its stream and CUDA hands the same value out again on the same device, the cached weft
 * stream serves the new stream exactly as a fresh binding would, with its earlier calls
 * already ordered before the new ones (weft's tickets only add order). The entries are never
 * freed: a process makes few streams, and NCCL keeps its own per-stream state the same way. */
typedef struct cached {
  cudaStream_t cs;
  int device;
  weft_stream_t ws;
  struct cached *next;
} cached;

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static cached *cache;
#define MAX_KERNEL_DEVICES 64
static int kernels_loaded[MAX_KERNEL_DEVICES]; /* weft__nccl_kernels_load ran there (cache_mu) */

static weft_stream_t lookup(cudaStream_t cs, int device) {
  for (cached *c = cache; c != NULL; c = c->next)
    if (c->cs == cs && c->device == device) return c->ws;
  return NULL;
}

ncclResult_t nccl__cuda_stream(cudaStream_t cs, weft_stream_t *out, const char *what) {
  if (!nccl__cuda_present())
    return nccl__fail(ncclInvalidUsage, "%s: cudaStream_t %p: %s; give NULL (or a stream from "
                      "ncclWeftStreamCreate) and host buffers", what, (void *)cs, no_device_why);
  int device = -1;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return nccl__fail(ncclUnhandledCudaError, "%s: cudaStream_t %p: cudaGetDevice: %s", what, (void *)cs,
                      cudaGetErrorString(e));
  }
  pthread_mutex_lock(&cache_mu);
  weft_stream_t ws = lookup(cs, device);
  ncclResult_t r = ncclSuccess;
  if (ws == NULL) {
    cached *c = calloc(1, sizeof *c);
    weft_status_t st = c == NULL ? WEFT_ERR_NO_MEMORY : weft_stream_create_cuda(&ws, cs);
    /* the scaling kernel loaded now, before this stream waits on weft: see nccl_kernels.cu.
     * Once per device: later, another rank's stream of this process may already wait, and
     * even a load that finds the kernel loaded is not promised to skip the context's drain */
    int le = 0;
    if (st == WEFT_SUCCESS && (device < 0 || device >= MAX_KERNEL_DEVICES || !kernels_loaded[device])) {
      le = weft__nccl_kernels_load();
      if (le == 0 && device >= 0 && device < MAX_KERNEL_DEVICES) kernels_loaded[device] = 1; /* under cache_mu */
    }
    if (le != 0) {
      weft_stream_destroy(ws);
      ws = NULL;
      free(c);
      pthread_mutex_unlock(&cache_mu);
      return nccl__fail(ncclUnhandledCudaError, "%s: loading the PreMulSum kernel on device %d: %s", what,
                        device, cudaGetErrorString((cudaError_t)le));
    }
    if (st == WEFT_SUCCESS) {
      c->cs = cs, c->device = device, c->ws = ws, c->next = cache, cache = c;
    } else {
      free(c);
      ws = NULL;
      r = nccl__fail(nccl__from_weft(st), "%s: cudaStream_t %p on device %d: %s", what, (void *)cs, device,
                     c == NULL ? "out of memory" : weft_get_last_error(NULL));
    }
  }
  pthread_mutex_unlock(&cache_mu);
  if (r != ncclSuccess) return r;
  arm();
  *out = ws;
  return ncclSuccess;
}

/* ---- ncclMemAlloc ---------------------------------------------------------------------------- */

int nccl__cuda_mem_device(void) {
  const char *e = getenv("WEFT_NCCL_MEM");
  if (e != NULL && strcmp(e, "host") == 0) return 0;
  return nccl__cuda_present();
}

/* ---- PreMulSum on device buffers ------------------------------------------------------------------ */

int nccl__cuda_is_device(const void *p) { return is_device_pointer(p); }

int nccl__cuda_read(void *dst, const void *src, size_t n) {
  if (cudaMemcpy(dst, src, n, cudaMemcpyDefault) == cudaSuccess) return 0;
  cudaGetLastError();
  return -1;
}

ncclResult_t nccl__cuda_scale(void **scaled, const void *input, size_t count, weft_datatype_t dt,
                              const void *scalar_ptr, const void *scalar_value, cudaStream_t cs,
                              const char *what) {
  /* cs is the stream the call runs in: the caller's CUDA stream, or the legacy default stream
   * (NULL) for a blocking call, where weft's NULL-stream path on device buffers runs too. */
  size_t bytes = count * weft_datatype_size(dt);
  const void *sdev = scalar_ptr != NULL && is_device_pointer(scalar_ptr) ? scalar_ptr : NULL;
  const void *shost = sdev != NULL ? NULL : scalar_ptr != NULL ? scalar_ptr : scalar_value;
  cudaError_t e = cudaMallocAsync(scaled, bytes, cs);
  if (e == cudaSuccess) e = (cudaError_t)weft__nccl_scale(*scaled, input, count, (int)dt, sdev, shost, cs);
  /* Not on a CUDA stream: weft's call may read the copy outside the legacy stream's order (a
   * stream from ncclWeftStreamCreate), so it is complete first. */
  if (e == cudaSuccess && cs == NULL) e = cudaStreamSynchronize(NULL);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (*scaled != NULL) cudaFreeAsync(*scaled, cs);
    *scaled = NULL;
    return nccl__fail(ncclUnhandledCudaError, "%s: scaling the PreMulSum input on the device: %s", what,
                      cudaGetErrorString(e));
  }
  return ncclSuccess;
}

void nccl__cuda_free_async(void *p, cudaStream_t cs) {
  if (p != NULL && cudaFreeAsync(p, cs) != cudaSuccess) cudaGetLastError();
}

#else /* no CUDA: the host-only contract */

int nccl__cuda_present(void) { return 0; }
void nccl__cuda_see(const void *a, const void *b) {}
int nccl__cuda_mem_device(void) { return 0; }
int nccl__cuda_is_device(const void *p) { return 0; }
int nccl__cuda_read(void *dst, const void *src, size_t n) { return -1; }

ncclResult_t nccl__cuda_stream(cudaStream_t cs, weft_stream_t *out, const char *what) {
  return nccl__fail(ncclInvalidUsage, "%s: stream %p is neither NULL nor a stream from "
                    "ncclWeftStreamCreate: this build takes host buffers and no CUDA stream", what, (void *)cs);
}

ncclResult_t nccl__cuda_scale(void **scaled, const void *input, size_t count, weft_datatype_t dt,
                              const void *scalar_ptr, const void *scalar_value, cudaStream_t cs,
                              const char *what) {
  return nccl__fail(ncclInvalidUsage, "%s: device buffers need a build of weft with CUDA", what);
}

void nccl__cuda_free_async(void *p, cudaStream_t cs) {}
#endif

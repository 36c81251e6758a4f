/* cuda.c: the CUDA device memory space (mem/cuda.h; the contract is mem/space.h's).
 *
 * Data. copy is cudaMemcpyAsync with cudaMemcpyDefault (unified addressing resolves device,
 * pinned and pageable host memory alike); reduce, avg and reduce_fanout are the kernels of
 * mem/cuda_kernels.cu; fill is cudaMemsetAsync. All go on the calling thread's own stream,
 * so one thread's operations run in issue order, and wait synchronizes that stream. A CUDA
 * failure cannot be returned by an operation (the contract): the first one is kept per
 * thread and the caller collects it with weft__cuda_take_error after the task
 * (lib/stream_cuda.c turns it into the task's error).
 *
 * Memory. alloc is cudaMalloc. export_buf works on any device allocation, not only ours:
 * the allocation's base comes from the driver (cuPointerGetAttributes), its
 * cudaIpcMemHandle_t travels in the handle's token with the offset of the buffer in it,
 * and import_buf opens it with cudaIpcOpenMemHandle. Opening costs a driver round trip
 * (hundreds of us), so every opened handle is kept, keyed by its bytes (a new allocation
 * gets a new handle), until the process exits, as NCCL keeps its IPC registrations.
 * Legacy CUDA IPC works between processes on one GPU too (several ranks per GPU), which
 * cuMem file descriptors would also allow but need a descriptor passed per allocation.
 *
 * The driver API (stream memory operations, pointer attributes) is reached through
 * cudaGetDriverEntryPointByVersion, so libweft links only the runtime. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lib/status.h"
#include "mem/cuda.h"
#include "mem/cuda_kernels.h"
#include "mem/space.h"

/* ---- the driver entry points ----------------------------------------------------------- */

typedef CUresult (*pfn_pointer_attrs)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
static pfn_pointer_attrs drv_pointer_attrs;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

void *weft__cuda_driver_entry(const char *name) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    fn = NULL;
  cudaGetLastError();
  return fn;
}

static void load_driver(void) { drv_pointer_attrs = (pfn_pointer_attrs)weft__cuda_driver_entry("cuPointerGetAttributes"); }

/* ---- per-thread stream and error --------------------------------------------------------- */

static __thread cudaStream_t tl_stream;
static __thread int tl_stream_device = -1;
static __thread cudaError_t tl_error;
static __thread char tl_error_what[96];

static void note(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  cudaGetLastError(); /* clear the sticky-free part so later calls are judged on their own */
  if (tl_error != cudaSuccess) return;
  tl_error = e;
  snprintf(tl_error_what, sizeof tl_error_what, "%s", what);
}

void *weft__cuda_thread_stream(void) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  if (tl_stream != NULL && tl_stream_device == dev) return tl_stream;
  cudaStream_t s;
  /* Non-blocking: never serialized with the legacy default stream of the user's code. */
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    note(e, "cudaStreamCreateWithFlags");
    return NULL;
  }
  tl_stream = s; /* a previous device's stream is kept: its thread may still run there */
  tl_stream_device = dev;
  return s;
}

void weft__cuda_use_thread_stream(void *stream, int device) {
  tl_stream = (cudaStream_t)stream;
  tl_stream_device = device;
}

weft_status_t weft__cuda_take_error(char *msg, size_t len) {
  if (tl_error == cudaSuccess) return WEFT_SUCCESS;
  snprintf(msg, len, "%s: %s (%s)", tl_error_what, cudaGetErrorString(tl_error), cudaGetErrorName(tl_error));
  weft_status_t st = tl_error == cudaErrorMemoryAllocation ? WEFT_ERR_NO_MEMORY : WEFT_ERR_SYSTEM;
  tl_error = cudaSuccess;
  return st;
}

int weft__cuda_usable(char *why, size_t len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    snprintf(why, len, "no CUDA device: %s", cudaGetErrorString(e));
    return 0;
  }
  if (n == 0) {
    snprintf(why, len, "no CUDA device: the driver reports none");
    return 0;
  }
  return 1;
}

static atomic_int armed;

void weft__cuda_arm(void) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&armed, &expected, 1)) {
    pthread_once(&drv_once, load_driver);
    atomic_fetch_add(&weft__mem_foreign_blocks, 1); /* weft__mem_space_of asks the spaces from now on */
  }
}

/* ---- data ------------------------------------------------------------------------------ */

static void cuda_copy(const weft__mem_space *s, void *dst, const void *src, size_t n, unsigned flags) {
  cudaStream_t st = weft__cuda_thread_stream();
  const char *d = dst, *c = src;
  if ((flags & WEFT__MEM_OVERLAP) && d < c + n && c < d + n && d != c) {
    /* cudaMemcpy takes no overlapping regions: through a temporary (a rare path). */
    void *tmp = NULL;
    cudaError_t e = cudaMallocAsync(&tmp, n, st);
    if (e == cudaSuccess) e = cudaMemcpyAsync(tmp, src, n, cudaMemcpyDefault, st);
    if (e == cudaSuccess) e = cudaMemcpyAsync(dst, tmp, n, cudaMemcpyDefault, st);
    if (tmp != NULL) cudaFreeAsync(tmp, st);
    note(e, "overlapping device copy");
    return;
  }
  note(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, st), "cudaMemcpyAsync");
}

static void cuda_reduce(const weft__mem_space *s, void *dst, const void *a, const void *b, size_t count,
                        weft_datatype_t dt, weft_redop_t op) {
  note((cudaError_t)weft__cuda_reduce(dst, a, b, count, dt, op, weft__cuda_thread_stream()), "reduction kernel");
}

static void cuda_avg(const weft__mem_space *s, void *buf, size_t count, weft_datatype_t dt, int divisor) {
  note((cudaError_t)weft__cuda_avg(buf, count, dt, divisor, weft__cuda_thread_stream()), "average kernel");
}

static void cuda_fill(const weft__mem_space *s, void *dst, int byte, size_t n) {
  note(cudaMemsetAsync(dst, byte, n, weft__cuda_thread_stream()), "cudaMemsetAsync");
}

static int cuda_reduce_fanout(const weft__mem_space *s, char *const *out, int nout, char *const *in, int nin,
                              size_t count, weft_datatype_t dt, weft_redop_t op) {
  if (nin < 2 || nin > 8 || nout < 1 || nout > 8) return 0;
  note((cudaError_t)weft__cuda_reduce_fanout(out, nout, in, nin, count, dt, op, weft__cuda_thread_stream()),
       "fan-out reduction kernel");
  return 1;
}

static void cuda_wait(const weft__mem_space *s) {
  cudaStream_t st = weft__cuda_thread_stream();
  if (st != NULL) note(cudaStreamSynchronize(st), "cudaStreamSynchronize");
}

static void *cuda_host_view(const weft__mem_space *s, const void *p, size_t n) { return NULL; }

/* ---- memory ------------------------------------------------------------------------------ */

static weft_status_t cuda_alloc(const weft__mem_space *s, size_t bytes, void **p) {
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return weft__error(NULL, e == cudaErrorMemoryAllocation ? WEFT_ERR_NO_MEMORY : WEFT_ERR_SYSTEM,
                       "weft_mem_alloc_device: cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
  }
  return WEFT_SUCCESS;
}

static weft_status_t cuda_free(const weft__mem_space *s, void *p) {
  if (p == NULL) return WEFT_SUCCESS;
  cudaError_t e = cudaFree(p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_mem_free: cudaFree: %s", cudaGetErrorString(e));
  }
  return WEFT_SUCCESS;
}

static int cuda_owns(const weft__mem_space *s, const void *p) {
  if (!atomic_load_explicit(&armed, memory_order_relaxed) || p == NULL) return 0;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* The allocation holding p: its base and size. */
static int allocation_of(const void *p, CUdeviceptr *base, size_t *size) {
  if (drv_pointer_attrs == NULL) return 0;
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void *vals[2] = {base, size};
  return drv_pointer_attrs(2, attrs, vals, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS;
}

static int cuda_export(const weft__mem_space *s, const void *p, size_t bytes, weft__mem_handle *h) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (!allocation_of(p, &base, &size)) return 0;
  size_t off = (size_t)((uintptr_t)p - (uintptr_t)base);
  if (!weft__span_fits(off, bytes, size)) return 0;
  cudaIpcMemHandle_t ipc;
  if (cudaIpcGetMemHandle(&ipc, (void *)(uintptr_t)base) != cudaSuccess) {
    cudaGetLastError(); /* not IPC-capable memory (cuMem without a shareable handle, managed) */
    return 0;
  }
  _Static_assert(sizeof ipc <= sizeof h->token, "cudaIpcMemHandle_t fits the token");
  memset(h, 0, sizeof *h);
  h->pid = (int32_t)getpid();
  h->fd = -1;
  h->offset = off;
  h->bytes = bytes;
  memcpy(h->token, &ipc, sizeof ipc);
  return 1;
}

/* Opened peer allocations, kept for the life of the process (see the top). */
typedef struct opened {
  unsigned char token[64];
  int device;
  char *base;
  struct opened *next;
} opened;
static pthread_mutex_t opened_lock = PTHREAD_MUTEX_INITIALIZER;
static opened *opened_list;

static int cuda_import(const weft__mem_space *s, const weft__mem_handle *h, weft__mem_mapping *m) {
  memset(m, 0, sizeof *m);
  if (h->pid == (int32_t)getpid()) return EINVAL; /* a process cannot open its own handle */
  int dev = 0;
  cudaGetDevice(&dev);
  pthread_mutex_lock(&opened_lock);
  opened *o = opened_list;
  while (o != NULL && !(o->device == dev && memcmp(o->token, h->token, sizeof o->token) == 0)) o = o->next;
  int rc = 0;
  if (o == NULL) {
    cudaIpcMemHandle_t ipc;
    memcpy(&ipc, h->token, sizeof ipc);
    void *base = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&base, ipc, cudaIpcMemLazyEnablePeerAccess);
    o = e == cudaSuccess ? calloc(1, sizeof *o) : NULL;
    if (o == NULL) {
      if (e != cudaSuccess) cudaGetLastError();
      else cudaIpcCloseMemHandle(base);
      rc = e == cudaSuccess ? ENOMEM : EIO;
    } else {
      memcpy(o->token, h->token, sizeof o->token);
      o->device = dev;
      o->base = base;
      o->next = opened_list;
      opened_list = o;
    }
  }
  if (rc == 0) m->base = o->base + h->offset; /* map_addr stays NULL: kept open (above) */
  pthread_mutex_unlock(&opened_lock);
  return rc;
}

static void cuda_unimport(const weft__mem_space *s, weft__mem_mapping *m) { memset(m, 0, sizeof *m); }

const weft__mem_space weft__mem_cuda = {
    .name = "cuda",
    .kind = WEFT__MEM_CUDA,
    .flags = 0, /* asynchronous: operations complete at wait */
    .copy = cuda_copy,
    .reduce = cuda_reduce,
    .avg = cuda_avg,
    .fill = cuda_fill,
    .reduce_fanout = cuda_reduce_fanout,
    .wait = cuda_wait,
    .host_view = cuda_host_view,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .owns = cuda_owns,
    .export_buf = cuda_export,
    .import_buf = cuda_import,
    .unimport = cuda_unimport,
};

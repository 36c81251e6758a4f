/* nccl_internal.h: what the files of weft's NCCL-compatible library share. */
#ifndef WEFT_NCCL_INTERNAL_H
#define WEFT_NCCL_INTERNAL_H
#include <pthread.h>
#include "nccl/nccl.h"
#include "weft.h"

/* Defines pncclNAME and exports ncclNAME as its weak alias, as NCCL does (profilers
 * interpose ncclNAME and call pncclNAME). */
#define NCCL_API(ret, name, ...)                                                          \
  __attribute__((visibility("default"))) ret name(__VA_ARGS__)                            \
      __attribute__((weak, alias("p" #name)));                                             \
  __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

/* A PreMulSum op made by ncclRedOpCreatePreMulSum: its slot is op - ncclNumOps. */
typedef struct {
  int used;
  ncclDataType_t datatype;
  const void *scalar_ptr;   /* ncclScalarDevice: read at each call */
  unsigned char scalar[8];  /* ncclScalarHostImmediate: read at creation */
} nccl__premul;

#define NCCL__MAX_PREMUL 64

struct ncclComm {
  weft_comm_t w;
  int rank, nranks;
  int revoked;                /* ncclCommRevoke: every later operation fails */
  pthread_mutex_t mu;         /* guards premul */
  nccl__premul premul[NCCL__MAX_PREMUL];
};

/* Records a message as this thread's last error (ncclGetLastError) and returns r. */
ncclResult_t nccl__fail(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Maps a weft status; on failure takes weft's message as the last error. */
ncclResult_t nccl__from_weft(weft_status_t st);
/* Checks comm (not NULL, not revoked) for operation what. */
ncclResult_t nccl__check_comm(const struct ncclComm *comm, const char *what);
/* weft's datatype for dt, or ncclInvalidUsage (fp8) / ncclInvalidArgument. */
ncclResult_t nccl__dtype(ncclDataType_t dt, weft_datatype_t *out, const char *what);
/* The weft stream for a stream argument (NULL: blocking); *async = 1 when it is bound to a
 * CUDA stream (the call returns at once, its errors come later). */
ncclResult_t nccl__stream(cudaStream_t s, weft_stream_t *out, int *async, const char *what);
/* Reads a versioned ncclConfig_t (NULL: defaults) into weft's config. */
ncclResult_t nccl__config(const ncclConfig_t *cfg, weft_config_t *out, const char *what);
/* Wraps a weft communicator (NULL stays NULL); ncclSystemError when out of memory. */
ncclResult_t nccl__wrap(weft_comm_t w, int rank, int nranks, ncclComm_t *out);

/* A PreMulSum op's scaled copy of a call's input: host memory (free) or device memory
 * (freed in stream order on cs, after the call's use of it). */
typedef struct {
  void *p;
  int on_device;
  cudaStream_t cs;
} nccl__scaled;

/* The weft op for op on comm; for a PreMulSum op, *scaled = a copy of the count elements of
 * input multiplied by its scalar (on the device, in cs's order, when input is device memory;
 * the caller releases it after the call with nccl__scaled_release) and *wop = WEFT_SUM; else
 * scaled->p = NULL. */
ncclResult_t nccl__resolve_op(struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t dt,
                              const void *input, size_t count, cudaStream_t cs, weft_redop_t *wop,
                              nccl__scaled *scaled, const char *what);
void nccl__scaled_release(nccl__scaled *scaled);

/* nccl_cuda.c: CUDA where the build has it (each says "no" without WEFT_HAVE_CUDA).
 * A CUDA device is present (probed once). */
int nccl__cuda_present(void);
/* Arms weft's device-pointer recognition once a or b is device memory. */
void nccl__cuda_see(const void *a, const void *b);
/* The weft stream bound to cs on the current device, made on first use and cached. */
ncclResult_t nccl__cuda_stream(cudaStream_t cs, weft_stream_t *out, const char *what);
/* ncclMemAlloc hands out device memory (a device is present and WEFT_NCCL_MEM is not "host"). */
int nccl__cuda_mem_device(void);
/* p is device (or managed) memory. */
int nccl__cuda_is_device(const void *p);
/* Copies n bytes of device memory to the host (0 on success). */
int nccl__cuda_read(void *dst, const void *src, size_t n);
/* *scaled = input * scalar on the device in cs's order (scalar_ptr: ncclScalarDevice's pointer,
 * else scalar_value: one element of dt on the host). */
ncclResult_t nccl__cuda_scale(void **scaled, const void *input, size_t count, weft_datatype_t dt,
                              const void *scalar_ptr, const void *scalar_value, cudaStream_t cs,
                              const char *what);
void nccl__cuda_free_async(void *p, cudaStream_t cs);
/* nccl_coll.c: this thread is inside ncclGroupStart/End; a communicator whose init started
 * inside the group is awaited at the outermost ncclGroupEnd. */
int nccl__in_group(void);
ncclResult_t nccl__group_defer_init(ncclComm_t comm);
/* nccl_comm.c: waits for a non-blocking init to end (weft's init deadline bounds it),
 * yielding, then napping; its status (never WEFT_IN_PROGRESS unless the query failed). */
weft_status_t nccl__wait_init(weft_comm_t w);
#endif

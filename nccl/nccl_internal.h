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
/* The weft stream for a stream argument (NULL: blocking). */
ncclResult_t nccl__stream(cudaStream_t s, weft_stream_t *out, const char *what);
/* Reads a versioned ncclConfig_t (NULL: defaults) into weft's config. */
ncclResult_t nccl__config(const ncclConfig_t *cfg, weft_config_t *out, const char *what);
/* Wraps a weft communicator (NULL stays NULL); ncclSystemError when out of memory. */
ncclResult_t nccl__wrap(weft_comm_t w, int rank, int nranks, ncclComm_t *out);

/* The weft op for op on comm; for a PreMulSum op, *scaled = a copy of the count elements of
 * input multiplied by its scalar (the caller frees it after the call) and *wop = WEFT_SUM; else
 * *scaled = NULL. */
ncclResult_t nccl__resolve_op(struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t dt,
                              const void *input, size_t count, weft_redop_t *wop, void **scaled,
                              const char *what);
#endif

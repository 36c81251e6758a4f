/* nccl_util.c: errors, datatypes, streams and configs of weft's NCCL-compatible library. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nccl/nccl_internal.h"
#include "nccl/nccl_weft.h"

static __thread char last_error[1024];

ncclResult_t nccl__fail(ncclResult_t r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  va_end(ap);
  return r;
}

static ncclResult_t map_status(weft_status_t st) {
  switch (st) {
    case WEFT_SUCCESS: return ncclSuccess;
    case WEFT_IN_PROGRESS: return ncclInProgress;
    case WEFT_ERR_INVALID_ARGUMENT: return ncclInvalidArgument;
    case WEFT_ERR_AUTH: return ncclInvalidArgument;       /* a wrong or reused unique id */
    case WEFT_ERR_INVALID_USAGE: return ncclInvalidUsage;
    case WEFT_ERR_ABORTED: return ncclInvalidUsage;       /* use after ncclCommAbort */
    case WEFT_ERR_UNSUPPORTED: return ncclInvalidUsage;
    case WEFT_ERR_REVOKED: return ncclInvalidUsage;       /* as ncclCommRevoke's own check */
    case WEFT_ERR_SYSTEM: return ncclSystemError;
    case WEFT_ERR_NO_MEMORY: return ncclSystemError;
    case WEFT_ERR_REMOTE: return ncclRemoteError;
    case WEFT_ERR_TIMEOUT: return ncclRemoteError;        /* NCCL 2.28 has no timeout code */
    default: return ncclInternalError;
  }
}

ncclResult_t nccl__from_weft(weft_status_t st) {
  if (st != WEFT_SUCCESS && st != WEFT_IN_PROGRESS)
    snprintf(last_error, sizeof(last_error), "%s", weft_get_last_error(NULL));
  return map_status(st);
}

ncclResult_t nccl__check_comm(const struct ncclComm *comm, const char *what) {
  if (comm == NULL) return nccl__fail(ncclInvalidArgument, "%s: comm is NULL", what);
  if (comm->revoked)
    return nccl__fail(ncclInvalidUsage, "rank %d: %s: the communicator was revoked (ncclCommRevoke)",
                      comm->rank, what);
  return ncclSuccess;
}

ncclResult_t nccl__dtype(ncclDataType_t dt, weft_datatype_t *out, const char *what) {
  if (dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2)
    return nccl__fail(ncclInvalidUsage, "%s: fp8 datatypes (%d) are not supported by weft", what, (int)dt);
  if ((int)dt < 0 || (int)dt >= (int)WEFT_NUM_DATATYPES)
    return nccl__fail(ncclInvalidArgument, "%s: invalid datatype %d", what, (int)dt);
  *out = (weft_datatype_t)dt; /* weft's datatype values are NCCL's */
  return ncclSuccess;
}

/* ---- weft streams handed out as cudaStream_t ---------------------------------------- */

#define MAX_STREAMS 256
static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static weft_stream_t streams[MAX_STREAMS];

static int stream_slot(weft_stream_t s) {
  for (int i = 0; i < MAX_STREAMS; i++)
    if (streams[i] == s) return i;
  return -1;
}

/* NULL, cudaStreamLegacy and cudaStreamPerThread: blocking (on device buffers weft runs the
 * call in the legacy default stream's order); a weft stream: as it is; any other value is a
 * CUDA stream (nccl_cuda.c binds it, or says why it cannot). */
ncclResult_t nccl__stream(cudaStream_t s, weft_stream_t *out, int *async, const char *what) {
  *out = NULL, *async = 0;
  if (s == NULL || s == (cudaStream_t)0x1 || s == (cudaStream_t)0x2) return ncclSuccess;
  pthread_mutex_lock(&streams_mu);
  int known = stream_slot((weft_stream_t)s) >= 0;
  pthread_mutex_unlock(&streams_mu);
  if (known) {
    *out = (weft_stream_t)s;
    return ncclSuccess;
  }
  ncclResult_t r = nccl__cuda_stream(s, out, what);
  if (r == ncclSuccess) *async = 1;
  return r;
}

__attribute__((visibility("default"))) ncclResult_t ncclWeftStreamCreate(cudaStream_t *stream) {
  if (stream == NULL) return nccl__fail(ncclInvalidArgument, "ncclWeftStreamCreate: stream is NULL");
  weft_stream_t s;
  weft_status_t st = weft_stream_create(&s);
  if (st != WEFT_SUCCESS) return nccl__from_weft(st);
  pthread_mutex_lock(&streams_mu);
  int slot = stream_slot(NULL);
  if (slot >= 0) streams[slot] = s;
  pthread_mutex_unlock(&streams_mu);
  if (slot < 0) {
    weft_stream_destroy(s);
    return nccl__fail(ncclSystemError, "ncclWeftStreamCreate: more than %d streams", MAX_STREAMS);
  }
  *stream = (cudaStream_t)s;
  return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclWeftStreamDestroy(cudaStream_t stream) {
  pthread_mutex_lock(&streams_mu);
  int slot = stream == NULL ? -1 : stream_slot((weft_stream_t)stream);
  if (slot >= 0) streams[slot] = NULL;
  pthread_mutex_unlock(&streams_mu);
  if (slot < 0) return nccl__fail(ncclInvalidArgument, "ncclWeftStreamDestroy: %p is not a weft stream", (void *)stream);
  return nccl__from_weft(weft_stream_destroy((weft_stream_t)stream));
}

/* ---- versioned config ------------------------------------------------------------------ */

#define NCCL_CONFIG_MAGIC 0xcafebeefu
/* The caller's struct holds field f (an older, shorter struct leaves later fields out). */
#define HAS_FIELD(cfg, f) ((cfg)->size >= offsetof(ncclConfig_t, f) + sizeof((cfg)->f))

ncclResult_t nccl__config(const ncclConfig_t *cfg, weft_config_t *out, const char *what) {
  weft_config_t def = WEFT_CONFIG_INITIALIZER;
  *out = def;
  if (cfg == NULL) return ncclSuccess;
  if (cfg->magic != NCCL_CONFIG_MAGIC || cfg->size < offsetof(ncclConfig_t, blocking))
    return nccl__fail(ncclInvalidArgument, "%s: config was not initialized with NCCL_CONFIG_INITIALIZER "
                      "(magic 0x%x, size %zu)", what, cfg->magic, cfg->size);
  if (HAS_FIELD(cfg, blocking) && cfg->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (cfg->blocking != 0 && cfg->blocking != 1)
      return nccl__fail(ncclInvalidArgument, "%s: config blocking must be 0 or 1, got %d", what, cfg->blocking);
    out->blocking = cfg->blocking;
  }
  return ncclSuccess;
}

ncclResult_t nccl__wrap(weft_comm_t w, int rank, int nranks, ncclComm_t *out) {
  *out = NULL;
  if (w == NULL) return ncclSuccess;
  struct ncclComm *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    weft_comm_destroy(w);
    return nccl__fail(ncclSystemError, "rank %d: out of memory", rank);
  }
  c->w = w, c->rank = rank, c->nranks = nranks;
  pthread_mutex_init(&c->mu, NULL);
  *out = c;
  return ncclSuccess;
}

NCCL_API(const char *, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error (out of memory, a system call failed)";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage (or not supported by this build of weft)";
    case ncclRemoteError: return "remote process exited, failed or did not answer in time";
    case ncclInProgress: return "operation in progress";
    default: return "unknown result code";
  }
}

NCCL_API(const char *, ncclGetLastError, ncclComm_t comm) { return last_error; }

NCCL_API(ncclResult_t, ncclGetVersion, int *version) {
  if (version == NULL) return nccl__fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

NCCL_API(void, ncclResetDebugInit, void) {
  /* weft reads WEFT_DEBUG when it first logs; there is nothing to reset. */
}

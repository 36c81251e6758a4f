/*
 * nccl_weft.h: what weft's libnccl.so.2 adds to NCCL's API (not part of NCCL).
 *
 * On this build a collective's stream is NULL (or cudaStreamLegacy / cudaStreamPerThread),
 * or a weft stream made here: its operations run in order with the stream's earlier ones,
 * and the call still completes before it returns. Any other cudaStream_t value gets
 * ncclInvalidUsage (it cannot be told apart from a CUDA stream, which this build cannot use).
 */
#ifndef NCCL_WEFT_H_
#define NCCL_WEFT_H_
#include "nccl.h"
#ifdef __cplusplus
extern "C" {
#endif

/* *stream = a new weft stream, usable as the stream argument of every call.
 * Errors: ncclInvalidArgument (stream NULL), ncclSystemError. Thread-safe. */
ncclResult_t ncclWeftStreamCreate(cudaStream_t *stream);
/* Waits for the stream's operations and frees it. Errors: ncclInvalidArgument (not a stream
 * from ncclWeftStreamCreate), or the stream's first error. Thread-safe. */
ncclResult_t ncclWeftStreamDestroy(cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* NCCL_WEFT_H_ */

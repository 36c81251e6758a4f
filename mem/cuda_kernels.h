/* cuda_kernels.h: the device memory space's kernels (mem/cuda_kernels.cu), behind a plain
 * C interface so that mem/cuda.c and the tests call them without CUDA headers.
 *
 * Every function gives, bit for bit, what the host kernels give on the same inputs:
 * weft__reduce, weft__avg_finalize (mem/reduce.c) and the fused fan-out of
 * weft__reduce_nt (mem/reduce_nt.c), whose bits are weft__reduce's pairwise left fold
 * followed by weft__avg_finalize. That includes the NaNs the host's x86 FPU makes: an
 * operation meeting a NaN returns the first NaN operand made quiet, an invalid one
 * (inf - inf, 0 * inf) returns x86's default NaN (negative, 0xffc00000); max and min are
 * `a > b ? a : b` and `a < b ? a : b`. The one freedom is the host's own: when sum or
 * prod meets two NaNs, the host may return either's payload (its compiler may commute the
 * operation); the device returns the first operand's.
 *
 * Pointers are device pointers of the current device (memory of this process or a peer's
 * mapped with cudaIpcOpenMemHandle), each aligned to its element size; a stream is a
 * cudaStream_t passed as void * (NULL: the legacy default stream). The calls only queue
 * work: it runs in stream order, and the caller synchronizes the stream (weft__mem_wait)
 * before anyone reads the result. cudaGetLastError reports the launch, so an earlier
 * unchecked error of the calling thread is returned (and cleared) here.
 * Each returns 0, or the cudaError_t of a failed launch (or of a failed attribute query)
 * as an int; arguments outside the contract (an unknown datatype or op, nin or nout out
 * of range) give cudaErrorInvalidValue. count == 0 launches nothing and returns 0.
 * Thread-safe. Build without -use_fast_math / -ftz=true: denormals must be kept. */
#ifndef WEFT_MEM_CUDA_KERNELS_H
#define WEFT_MEM_CUDA_KERNELS_H
#include <stddef.h>
#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most inputs and outputs weft__cuda_reduce_fanout takes (one kernel parameter holds
 * both pointer arrays). */
#define WEFT__CUDA_FANOUT_MAX 8

/* dst[i] = a[i] op b[i] for i < count. dst may equal a or b exactly (not partially
 * overlapping). WEFT_AVG reduces as WEFT_SUM; divide at the end with weft__cuda_avg. */
int weft__cuda_reduce(void *dst, const void *a, const void *b, size_t count, weft_datatype_t dt,
                      weft_redop_t op, void *stream);

/* buf[i] = buf[i] / divisor in the datatype's own arithmetic, as weft__avg_finalize:
 * integers divide truncating toward zero, float32 / float64 divide (correctly rounded),
 * fp16 / bf16 divide in fp32 and round to nearest-even. divisor <= 1: nothing. */
int weft__cuda_avg(void *buf, size_t count, weft_datatype_t dt, int divisor, void *stream);

/* out[j][i] = in[0][i] op in[1][i] op ... op in[nin-1][i], folded left in that order, each
 * step rounded to the datatype (fp16 / bf16 round after every pairwise op, as the host's
 * pairwise reductions do), divided by nin for WEFT_AVG, for every j < nout, in one kernel.
 * 2 <= nin <= 8, 1 <= nout <= 8. Outputs must not overlap the inputs, except that an output
 * may be exactly an input (each element is read completely before it is written). */
int weft__cuda_reduce_fanout(char *const *out, int nout, char *const *in, int nin, size_t count,
                             weft_datatype_t dt, weft_redop_t op, void *stream);

/* weft__cuda_reduce_fanout's fold, 1 <= nin <= 8 (nin 1: a copy of in[0] into every
 * output), done only if *gate reads nonzero when the kernel starts (each block reads it
 * once); otherwise the kernel writes nothing. gate is memory the device reads (mapped
 * pinned host memory: cudaHostGetDevicePointer), written by the host before the stream
 * reaches the kernel. For kernels queued before the host knows whether they may run
 * (lib/stream_cuda.c). */
int weft__cuda_fanout_gated(char *const *out, int nout, char *const *in, int nin, size_t count,
                            weft_datatype_t dt, weft_redop_t op, const volatile unsigned *gate, void *stream);

/* Loads every kernel of this file into the current device's context now, so that none is
 * loaded lazily at a launch made while one of the process's CUDA streams waits on weft
 * (loading waits for the whole context to drain: such a launch never returns). Call it for
 * each device before the first stream wait there; again is cheap (the kernels are loaded). */
int weft__cuda_kernels_load(void);

#ifdef __cplusplus
}
#endif
#endif

/* reduce_nt.h: a reduction fused with non-temporal stores to several outputs, for the
 * direct all-reduce (algos/all_reduce/direct.c) on buffers larger than the cache. */
#ifndef WEFT_MEM_REDUCE_NT_H
#define WEFT_MEM_REDUCE_NT_H
#include <stddef.h>
#include "weft.h"

/* out[j][i] = in[0][i] op in[1][i] op ... op in[nin-1][i] (in that order; divided by nin
 * for WEFT_AVG) for i < count and every j < nout, in one pass: each element is read once
 * from each input and written to every output with non-temporal stores, with no scratch
 * in between (perf/membw_floor's all_reduce_fused is this loop for two threads). The bits
 * equal weft__reduce's followed by weft__avg_finalize. Not fenced: call weft__store_fence
 * before publishing. Handles float32 and float64 with sum, prod and avg on x86-64 when all
 * outputs share their address mod 16; returns 1 when it did the work, 0 when the caller
 * must (another type or op, another CPU, mixed alignment). nin >= 2. Thread-safe. */
int weft__reduce_nt(char *const *out, int nout, char *const *in, int nin, size_t count,
                        weft_datatype_t dt, weft_redop_t op);
#endif

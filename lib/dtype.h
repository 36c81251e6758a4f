/* dtype.h: element sizes and names, and argument checks of datatypes and operations.
 * The kernels that compute on elements (reductions, fp16 / bf16 conversions) live with the
 * host memory space: mem/kernels.h. */
#ifndef WEFT_DTYPE_H
#define WEFT_DTYPE_H
#include <stddef.h>
#include <stdint.h>
#include "weft.h"

/* "int8", "float32", ... as nccl-tests prints them ("half" is spelled "half" there: we
 * print nccl-tests' names: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16). */
const char *weft__dtype_name(weft_datatype_t dt);
/* "sum", "prod", "max", "min", "avg". */
const char *weft__op_name(weft_redop_t op);

/* Inline: every call checks its datatype and op and sizes its buffers with these. */
extern const size_t weft__dtype_sizes[WEFT_NUM_DATATYPES];

/* 1 when dt / op is a valid enum value. Enums may be signed or unsigned depending on the
 * compiler; compared as int so a negative value from a caller is rejected either way. */
static inline int weft__dtype_valid(weft_datatype_t dt) {
  return (int)dt >= 0 && (int)dt < WEFT_NUM_DATATYPES;
}
static inline int weft__op_valid(weft_redop_t op) { return (int)op >= 0 && (int)op < WEFT_NUM_OPS; }

/* Bytes per element; 0 for an invalid datatype. */
static inline size_t weft__dtype_size(weft_datatype_t dt) {
  return weft__dtype_valid(dt) ? weft__dtype_sizes[dt] : 0;
}
#endif

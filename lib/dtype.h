/* dtype.h: element sizes and names, and argument checks of datatypes and operations.
 * The kernels that compute on elements (reductions, fp16 / bf16 conversions) live with the
 * host memory space: mem/kernels.h. */
#ifndef WEFT_DTYPE_H
#define WEFT_DTYPE_H
#include <stddef.h>
#include <stdint.h>
#include "weft.h"

/* Bytes per element; 0 for an invalid datatype. */
size_t weft__dtype_size(weft_datatype_t dt);
/* "int8", "float32", ... as nccl-tests prints them ("half" is spelled "half" there: we
 * print nccl-tests' names: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16). */
const char *weft__dtype_name(weft_datatype_t dt);
/* "sum", "prod", "max", "min", "avg". */
const char *weft__op_name(weft_redop_t op);
/* 1 when dt / op is a valid enum value. */
int weft__dtype_valid(weft_datatype_t dt);
int weft__op_valid(weft_redop_t op);
#endif

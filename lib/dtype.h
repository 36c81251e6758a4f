/* dtype.h: element sizes and the reduction kernels every algorithm uses.
 *
 * Kernels are plain loops that the compiler vectorizes; fp16 and bf16 are widened to fp32
 * for each operation and rounded back to nearest-even, as NCCL does. Integer sum and prod
 * wrap (computed on the unsigned type, so signed overflow is defined). */
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

/*
 * dst[i] = a[i] op b[i] for i < count. dst may equal a or b (exactly, not partially
 * overlapping). WEFT_AVG reduces as WEFT_SUM; divide at the end with weft__avg_finalize.
 * Thread-safe (pure).
 */
void weft__reduce(void *dst, const void *a, const void *b, size_t count, weft_datatype_t dt,
                  weft_redop_t op);

/* buf[i] = buf[i] / nranks in the datatype's own arithmetic (integer division truncates;
 * fp16/bf16 divide in fp32 and round to nearest-even). Thread-safe (pure). */
void weft__avg_finalize(void *buf, size_t count, weft_datatype_t dt, int nranks);

/* fp16 / bf16 <-> fp32 conversions, round-to-nearest-even, NaN kept quiet. */
float weft__half_to_float(uint16_t h);
uint16_t weft__float_to_half(float f);
float weft__bf16_to_float(uint16_t b);
uint16_t weft__float_to_bf16(float f);
/* The same conversions over arrays (n elements; dst and src must not overlap). These
 * loops vectorize; the fp16/bf16 reduction kernels run them once per block. */
void weft__half_to_float_n(float *dst, const uint16_t *src, size_t n);
void weft__float_to_half_n(uint16_t *dst, const float *src, size_t n);
void weft__bf16_to_float_n(float *dst, const uint16_t *src, size_t n);
void weft__float_to_bf16_n(uint16_t *dst, const float *src, size_t n);
#endif

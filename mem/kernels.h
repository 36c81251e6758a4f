/* kernels.h: the host memory space's kernels (mem/host.c calls them; tests and benches
 * call them directly): the element-wise reductions every reducing collective runs, the
 * final division of WEFT_AVG, and the fp16 / bf16 conversions.
 *
 * Kernels are chosen once at run time among generic C, AVX2 and AVX-512 (mem/reduce.c,
 * mem/reduce_simd.c; WEFT_SIMD forces one), and all levels give the same bits. fp16 and
 * bf16 are widened to fp32 for each operation and rounded back to nearest-even, as NCCL
 * does. Integer sum and prod wrap (computed on the unsigned type, so signed overflow is
 * defined). Algorithms never call these: they go through their task's memory space
 * (mem/space.h), which is what lets them run on memory the CPU cannot touch. */
#ifndef WEFT_MEM_KERNELS_H
#define WEFT_MEM_KERNELS_H
#include <stddef.h>
#include <stdint.h>
#include "weft.h"
#include "lib/dtype.h"

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
/* The same conversions over arrays (n elements; dst and src must not overlap), run by
 * the SIMD level in use (see weft__kernels below); bit-identical on every level. */
void weft__half_to_float_n(float *dst, const uint16_t *src, size_t n);
void weft__float_to_half_n(uint16_t *dst, const float *src, size_t n);
void weft__bf16_to_float_n(float *dst, const uint16_t *src, size_t n);
void weft__float_to_bf16_n(uint16_t *dst, const float *src, size_t n);
/* ---- Run-time SIMD dispatch (mem/reduce.c picks, mem/reduce_simd.c has the kernels) ---- */

/* Kernel sets, each a superset of the one before in what the CPU must have. */
typedef enum {
  WEFT__SIMD_GENERIC = 0, /* portable C, vectorized for the build's baseline */
  WEFT__SIMD_AVX2 = 1,    /* AVX2 + FMA + F16C, 256-bit */
  WEFT__SIMD_AVX512 = 2,  /* AVX-512 F/BW/VL/DQ + F16C, 512-bit */
  WEFT__SIMD_NUM_LEVELS
} weft__simd_t;

typedef void (*weft__reduce_fn)(void *dst, const void *a, const void *b, size_t n);
typedef void (*weft__widen_fn)(float *dst, const uint16_t *src, size_t n);
typedef void (*weft__narrow_fn)(uint16_t *dst, const float *src, size_t n);
typedef void (*weft__divide_fn)(void *buf, size_t n, int divisor);

/* One level's kernels: reduce[dt][op] has weft__reduce's contract for n >= 1 (dst may
 * equal a or b); divide[dt] weft__avg_finalize's for n >= 1 and divisor >= 2 (the SIMD
 * levels have their own for the floating types, whose vector division is IEEE's correctly
 * rounded quotient as the scalar one is; integers share the generic loops); the
 * conversions have the _n functions' contract. Every level gives the generic level's bits
 * for every input. */
struct weft__kernels {
  weft__simd_t level;
  weft__reduce_fn reduce[WEFT_NUM_DATATYPES][WEFT_NUM_OPS];
  weft__divide_fn divide[WEFT_NUM_DATATYPES];
  weft__widen_fn half_to_float_n, bf16_to_float_n;
  weft__narrow_fn float_to_half_n, float_to_bf16_n;
};

/* The kernels in use: the best level the CPU supports, or the one WEFT_SIMD asks for
 * (generic|avx2|avx512; an unsupported or unknown request warns and takes the best
 * supported level at or below it). Chosen once, on first use; thread-safe. */
const struct weft__kernels *weft__kernels(void);
/* The kernels of one level, or NULL when this CPU or build lacks it (tests, benches). */
const struct weft__kernels *weft__kernels_at(weft__simd_t level);
/* 1 when this CPU (and build) can run level. */
int weft__simd_supported(weft__simd_t level);
/* The level weft__kernels() takes for a WEFT_SIMD value (NULL or "": the best supported).
 * *unknown is set to 1 when request names no level (may be NULL). */
weft__simd_t weft__simd_choose(const char *request, int *unknown);
/* "generic", "avx2", "avx512". */
const char *weft__simd_name(weft__simd_t level);
/* reduce_simd.c: fills every entry of k with level's kernels; 0 when this build has no
 * such kernels (non-x86). Does not check the CPU. */
int weft__simd_fill(struct weft__kernels *k, weft__simd_t level);
/* half.c: the portable array conversions (the generic level's); the _n functions above
 * run the level in use. */
void weft__half_to_float_n_generic(float *dst, const uint16_t *src, size_t n);
void weft__float_to_half_n_generic(uint16_t *dst, const float *src, size_t n);
void weft__bf16_to_float_n_generic(float *dst, const uint16_t *src, size_t n);
void weft__float_to_bf16_n_generic(uint16_t *dst, const float *src, size_t n);
#endif

/* half.c: IEEE binary16 (fp16) and bfloat16 <-> binary32 conversions.
 *
 * Portable bit manipulation, no F16C: this is the generic level, the one that builds and
 * gives the reference bits on any x86-64 or aarch64 host; mem/reduce_simd.c has the
 * F16C / AVX2 / AVX-512 forms, which must (and are tested to) give the same bits. Every
 * conversion is written without branches (selects only) so that the array versions
 * below, which the generic fp16/bf16 reduction kernels call once per block,
 * auto-vectorize under -O3.
 *
 * Rules: float -> 16 bit rounds to nearest, ties to even; overflow gives infinity;
 * results below the smallest normal become subnormals (or zero) correctly rounded;
 * a NaN stays a NaN with its quiet bit set and the top payload bits kept. Widening is
 * exact, except that a signalling NaN comes back quiet (as F16C and ARM do). */
#include <string.h>
#include "mem/kernels.h"

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Branch-free choice. GCC turns some ?: into branches here, and a branch stops the
 * array loops from vectorizing; a mask is always a blend. */
static inline uint32_t select_u32(int cond, uint32_t if_true, uint32_t if_false) {
  uint32_t mask = 0u - (uint32_t)(cond != 0);
  return (if_true & mask) | (if_false & ~mask);
}

/* fp16 fields: 1 sign, 5 exponent (bias 15), 10 mantissa bits. fp32: 1, 8 (bias 127), 23.
 * Magnitudes are compared as int32_t: they fit, and SSE2 has only signed compares. */
static inline float half_to_float_inline(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  int32_t mag = h & 0x7fff;
  int subnormal = mag < 0x0400;
  /* Move the fields into place and rebias the exponent by 127 - 15; infinity and NaN
   * (exponent 31) rebias once more to land on exponent 255. */
  uint32_t bits = ((uint32_t)mag << 13) + ((uint32_t)(127 - 15) << 23);
  bits += select_u32(mag >= 0x7c00, (uint32_t)(127 - 15) << 23, 0);
  bits |= select_u32(mag > 0x7c00, 0x00400000u, 0); /* NaN: set the quiet bit */
  /* Subnormal (and zero): give it the implicit bit of the smallest normal, 2^-14, and
   * subtract that again in fp32, which is exact: mag * 2^-24 is normal in fp32. */
  bits += select_u32(subnormal, 1u << 23, 0);
  float f = f32_from_bits(bits) - f32_from_bits(select_u32(subnormal, 0x38800000u, 0));
  return f32_from_bits(f32_bits(f) | sign);
}

/* The result is assembled in the top 16 bits of a uint32_t and shifted down once at the
 * end: built in the low half, GCC narrows every intermediate separately, and on SSE2
 * (no cheap 32->16 pack) that triples the cost of the array loop. */
static inline uint16_t float_to_half_inline(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = u & 0x80000000u;
  int32_t mag = (int32_t)(u & 0x7fffffffu);
  /* |f| >= 2^16 overflows for sure (smaller values may still round up to infinity in
   * the normal path, which is correct: 65520 and above round to inf). NaN keeps its
   * top payload bits and is made quiet. */
  uint32_t nan = 0x7e000000u | (((uint32_t)mag << 3) & 0x03ff0000u);
  uint32_t special = select_u32(mag > 0x7f800000, nan, 0x7c000000u);
  /* Normal result, |f| in [2^-14, 2^16): rebias, then round the 13 dropped bits to
   * nearest even by adding 0xfff plus the lowest kept bit; a carry into the exponent
   * is the right answer (it is the next binade or infinity). */
  uint32_t odd = ((uint32_t)mag >> 13) & 1u;
  uint32_t normal = ((uint32_t)mag - ((uint32_t)(127 - 15) << 23) + 0x0fffu + odd) << 3;
  /* Subnormal result, |f| < 2^-14: adding 0.5 puts the fp32 ulp at 2^-24, the fp16
   * subnormal ulp, so the FPU's own round-to-nearest-even does the rounding; the low
   * bits of the sum are then the fp16 mantissa (a carry to 0x400 is the smallest normal). */
  uint32_t subnormal = (f32_bits(f32_from_bits((uint32_t)mag) + 0.5f) - f32_bits(0.5f)) << 16;
  uint32_t finite = select_u32(mag < 0x38800000, subnormal, normal);
  uint32_t bits = select_u32(mag >= 0x47800000, special, finite);
  return (uint16_t)((sign | bits) >> 16);
}

/* bf16 is the top half of an fp32, so widening is a shift. */
static inline float bf16_to_float_inline(uint16_t b) {
  uint32_t quiet = (b & 0x7fffu) > 0x7f80u ? 0x0040u : 0;
  return f32_from_bits((uint32_t)(b | quiet) << 16);
}

/* Round the low 16 bits to nearest even; the carry into the exponent handles the next
 * binade, overflow to infinity and subnormals alike. NaN must not round (it could
 * become infinity), so it is truncated and made quiet. */
static inline uint16_t float_to_bf16_inline(float f) {
  uint32_t u = f32_bits(f);
  uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  uint32_t nan = u | 0x00400000u;
  return (uint16_t)(select_u32(f != f, nan, rounded) >> 16);
}

float weft__half_to_float(uint16_t h) { return half_to_float_inline(h); }
uint16_t weft__float_to_half(float f) { return float_to_half_inline(f); }
float weft__bf16_to_float(uint16_t b) { return bf16_to_float_inline(b); }
uint16_t weft__float_to_bf16(float f) { return float_to_bf16_inline(f); }

/* Array forms: the loops the generic reduction kernels run on each block. */
void weft__half_to_float_n_generic(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = half_to_float_inline(src[i]);
}

void weft__float_to_half_n_generic(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = float_to_half_inline(src[i]);
}

void weft__bf16_to_float_n_generic(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = bf16_to_float_inline(src[i]);
}

void weft__float_to_bf16_n_generic(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = float_to_bf16_inline(src[i]);
}

/* The same, on the SIMD level in use. */
void weft__half_to_float_n(float *dst, const uint16_t *src, size_t n) {
  weft__kernels()->half_to_float_n(dst, src, n);
}

void weft__float_to_half_n(uint16_t *dst, const float *src, size_t n) {
  weft__kernels()->float_to_half_n(dst, src, n);
}

void weft__bf16_to_float_n(float *dst, const uint16_t *src, size_t n) {
  weft__kernels()->bf16_to_float_n(dst, src, n);
}

void weft__float_to_bf16_n(uint16_t *dst, const float *src, size_t n) {
  weft__kernels()->float_to_bf16_n(dst, src, n);
}

/* reduce_simd.c: the AVX2 and AVX-512 reduction kernels that lib/reduce.c picks at run
 * time (the build itself targets baseline x86-64, so these are compiled per function with
 * __attribute__((target(...))) and only ever called after the CPU has been checked).
 *
 * Two kinds of kernels:
 * - Integer, fp32 and fp64 loops are the same one-line loops as the generic ones,
 *   compiled for the wider ISA. GCC vectorizes all of them there, including the ones it
 *   cannot at baseline: 64-bit min/max (vpcmpgtq / vpmaxsq), 64-bit products (pmuludq
 *   sequence / vpmullq), signed 8-bit min/max and 8-bit products. AVX-512 asks for
 *   512-bit vectors (prefer-vector-width=512), AVX2 gets 256-bit ones.
 * - fp16 and bf16 are widened, combined in fp32 and narrowed in registers, 8 (AVX2) or
 *   16 (AVX-512) elements at a time, with no trip through memory. fp16 uses F16C's
 *   vcvtph2ps / vcvtps2ph with an immediate round-to-nearest-even (it ignores MXCSR's
 *   rounding mode; it quiets NaNs and keeps their top payload bits exactly as half.c
 *   does). bf16 is widened by a shift and narrowed with the same integer
 *   round-to-nearest-even as half.c (add 0x7fff plus the lowest kept bit; NaNs truncated
 *   and made quiet). AVX512_BF16's vcvtneps2bf16 is NOT used: it treats fp32 subnormal
 *   inputs as zero (measured on Zen 4: 0x00018000 gives 0x0000, not 0x0002), so its
 *   results would differ from the generic path.
 *
 * Every kernel gives the generic kernel's bits for every input; tests/test_reduce.c
 * checks that per level. dst may be exactly a or b: each vector is loaded from a and b
 * before the same positions of dst are stored. */
#include "lib/dtype.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <string.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,prefer-vector-width=512")))

#define OP_SUM(p, q) ((p) + (q))
#define OP_PROD(p, q) ((p) * (q))
#define OP_MAX(p, q) ((p) > (q) ? (p) : (q))
#define OP_MIN(p, q) ((p) < (q) ? (p) : (q))

/* The generic loop (reduce.c) compiled for ISA; sfx names the level. */
#define DEFINE_LOOP(ISA, name, T, OP)                                        \
  ISA static void name(void *dst, const void *a, const void *b, size_t n) { \
    T *d = dst;                                                              \
    const T *x = a, *y = b;                                                  \
    for (size_t i = 0; i < n; i++) d[i] = (T)OP(x[i], y[i]);                 \
  }

#define DEFINE_LOOPS(ISA, lvl, sfx, T)             \
  DEFINE_LOOP(ISA, sum_##sfx##_##lvl, T, OP_SUM)   \
  DEFINE_LOOP(ISA, prod_##sfx##_##lvl, T, OP_PROD) \
  DEFINE_LOOP(ISA, max_##sfx##_##lvl, T, OP_MAX)   \
  DEFINE_LOOP(ISA, min_##sfx##_##lvl, T, OP_MIN)

#define DEFINE_SIGNED(ISA, lvl, sfx, T)           \
  DEFINE_LOOP(ISA, max_##sfx##_##lvl, T, OP_MAX) \
  DEFINE_LOOP(ISA, min_##sfx##_##lvl, T, OP_MIN)

#define DEFINE_ALL_LOOPS(ISA, lvl)        \
  DEFINE_LOOPS(ISA, lvl, u8, uint8_t)     \
  DEFINE_LOOPS(ISA, lvl, u32, uint32_t)   \
  DEFINE_LOOPS(ISA, lvl, u64, uint64_t)   \
  DEFINE_LOOPS(ISA, lvl, f32, float)      \
  DEFINE_LOOPS(ISA, lvl, f64, double)     \
  DEFINE_SIGNED(ISA, lvl, i8, int8_t)     \
  DEFINE_SIGNED(ISA, lvl, i32, int32_t)   \
  DEFINE_SIGNED(ISA, lvl, i64, int64_t)

DEFINE_ALL_LOOPS(AVX2, avx2)
DEFINE_ALL_LOOPS(AVX512, avx512)

/* ---- AVX2: 8 fp16 / bf16 elements per step ---------------------------------------- */

AVX2 static inline __m256 half_widen8(const uint16_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

AVX2 static inline void half_narrow8(uint16_t *p, __m256 v) {
  _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* A bf16 NaN (magnitude above 0x7f80) gets its quiet bit, as half.c's widening does:
 * it matters for max/min, which return an operand unchanged. */
AVX2 static inline __m256 bf16_widen8(const uint16_t *p) {
  __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  __m256i mag = _mm256_and_si256(x, _mm256_set1_epi32(0x7fff));
  __m256i nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f80));
  x = _mm256_or_si256(x, _mm256_and_si256(nan, _mm256_set1_epi32(0x40)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
}

AVX2 static inline void bf16_narrow8(uint16_t *p, __m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd);
  __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  __m256i r = _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), nan));
  r = _mm256_srli_epi32(r, 16); /* now 0..0xffff: packus does not saturate */
  __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
  _mm_storeu_si128((__m128i *)p, _mm_packus_epi32(lo, hi));
}

/* The tail (fewer than 8 elements) goes through padded stack copies, so it runs the very
 * same instructions as the body. */
#define DEFINE_16BIT_AVX2(name, WIDEN, NARROW, VOP)                               \
  AVX2 static void name(void *dst, const void *a, const void *b, size_t n) {     \
    uint16_t *d = dst;                                                            \
    const uint16_t *x = a, *y = b;                                                \
    size_t i = 0;                                                                 \
    for (; i + 8 <= n; i += 8) NARROW(d + i, VOP(WIDEN(x + i), WIDEN(y + i)));    \
    if (i == n) return;                                                           \
    uint16_t tx[8] = {0}, ty[8] = {0}, td[8];                                     \
    memcpy(tx, x + i, (n - i) * 2);                                               \
    memcpy(ty, y + i, (n - i) * 2);                                               \
    NARROW(td, VOP(WIDEN(tx), WIDEN(ty)));                                        \
    memcpy(d + i, td, (n - i) * 2);                                               \
  }

#define DEFINE_16BIT_AVX2_OPS(sfx, WIDEN, NARROW)                       \
  DEFINE_16BIT_AVX2(sum_##sfx##_avx2, WIDEN, NARROW, _mm256_add_ps)     \
  DEFINE_16BIT_AVX2(prod_##sfx##_avx2, WIDEN, NARROW, _mm256_mul_ps)    \
  DEFINE_16BIT_AVX2(max_##sfx##_avx2, WIDEN, NARROW, _mm256_max_ps)     \
  DEFINE_16BIT_AVX2(min_##sfx##_avx2, WIDEN, NARROW, _mm256_min_ps)

/* _mm256_max_ps(p, q) is `p > q ? p : q` (q on NaN or equal), the generic OP_MAX. */
DEFINE_16BIT_AVX2_OPS(f16, half_widen8, half_narrow8)
DEFINE_16BIT_AVX2_OPS(bf16, bf16_widen8, bf16_narrow8)

/* Array conversions, for the finalize of WEFT_AVG and any other caller. */
#define DEFINE_WIDEN_AVX2(name, WIDEN)                                 \
  AVX2 static void name(float *dst, const uint16_t *src, size_t n) {  \
    size_t i = 0;                                                      \
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, WIDEN(src + i)); \
    if (i == n) return;                                                \
    uint16_t t[8] = {0};                                               \
    float f[8];                                                        \
    memcpy(t, src + i, (n - i) * 2);                                   \
    _mm256_storeu_ps(f, WIDEN(t));                                     \
    memcpy(dst + i, f, (n - i) * 4);                                   \
  }

#define DEFINE_NARROW_AVX2(name, NARROW)                               \
  AVX2 static void name(uint16_t *dst, const float *src, size_t n) {  \
    size_t i = 0;                                                      \
    for (; i + 8 <= n; i += 8) NARROW(dst + i, _mm256_loadu_ps(src + i)); \
    if (i == n) return;                                                \
    float f[8] = {0};                                                  \
    uint16_t t[8];                                                     \
    memcpy(f, src + i, (n - i) * 4);                                   \
    NARROW(t, _mm256_loadu_ps(f));                                     \
    memcpy(dst + i, t, (n - i) * 2);                                   \
  }

DEFINE_WIDEN_AVX2(half_to_float_n_avx2, half_widen8)
DEFINE_WIDEN_AVX2(bf16_to_float_n_avx2, bf16_widen8)
DEFINE_NARROW_AVX2(float_to_half_n_avx2, half_narrow8)
DEFINE_NARROW_AVX2(float_to_bf16_n_avx2, bf16_narrow8)

/* ---- AVX-512: 16 fp16 / bf16 elements per step, tails by masked loads/stores ------- */

AVX512 static inline __m512 half_widen16(__m256i h) { return _mm512_cvtph_ps(h); }

AVX512 static inline __m256i half_narrow16(__m512 v) {
  return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
}

AVX512 static inline __m512 bf16_widen16(__m256i h) {
  __m512i x = _mm512_cvtepu16_epi32(h);
  __m512i mag = _mm512_and_si512(x, _mm512_set1_epi32(0x7fff));
  __mmask16 nan = _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7f80));
  x = _mm512_mask_or_epi32(x, nan, x, _mm512_set1_epi32(0x40));
  return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}

AVX512 static inline __m256i bf16_narrow16(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd);
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

/* Two vectors per iteration keep two independent conversion chains in flight. */
#define DEFINE_16BIT_AVX512(name, WIDEN, NARROW, VOP)                                 \
  AVX512 static void name(void *dst, const void *a, const void *b, size_t n) {       \
    uint16_t *d = dst;                                                                \
    const uint16_t *x = a, *y = b;                                                    \
    size_t i = 0;                                                                     \
    for (; i + 32 <= n; i += 32) {                                                    \
      __m256i x0 = _mm256_loadu_si256((const __m256i *)(x + i));                      \
      __m256i x1 = _mm256_loadu_si256((const __m256i *)(x + i + 16));                 \
      __m256i y0 = _mm256_loadu_si256((const __m256i *)(y + i));                      \
      __m256i y1 = _mm256_loadu_si256((const __m256i *)(y + i + 16));                 \
      __m256i r0 = NARROW(VOP(WIDEN(x0), WIDEN(y0)));                                 \
      __m256i r1 = NARROW(VOP(WIDEN(x1), WIDEN(y1)));                                 \
      _mm256_storeu_si256((__m256i *)(d + i), r0);                                    \
      _mm256_storeu_si256((__m256i *)(d + i + 16), r1);                               \
    }                                                                                 \
    for (; i < n; i += 16) {                                                          \
      __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1); \
      __m256i xv = _mm256_maskz_loadu_epi16(m, x + i);                                \
      __m256i yv = _mm256_maskz_loadu_epi16(m, y + i);                                \
      _mm256_mask_storeu_epi16(d + i, m, NARROW(VOP(WIDEN(xv), WIDEN(yv))));          \
    }                                                                                 \
  }

#define DEFINE_16BIT_AVX512_OPS(sfx, WIDEN, NARROW)                      \
  DEFINE_16BIT_AVX512(sum_##sfx##_avx512, WIDEN, NARROW, _mm512_add_ps)  \
  DEFINE_16BIT_AVX512(prod_##sfx##_avx512, WIDEN, NARROW, _mm512_mul_ps) \
  DEFINE_16BIT_AVX512(max_##sfx##_avx512, WIDEN, NARROW, _mm512_max_ps)  \
  DEFINE_16BIT_AVX512(min_##sfx##_avx512, WIDEN, NARROW, _mm512_min_ps)

DEFINE_16BIT_AVX512_OPS(f16, half_widen16, half_narrow16)
DEFINE_16BIT_AVX512_OPS(bf16, bf16_widen16, bf16_narrow16)

#define DEFINE_WIDEN_AVX512(name, WIDEN)                                           \
  AVX512 static void name(float *dst, const uint16_t *src, size_t n) {            \
    for (size_t i = 0; i < n; i += 16) {                                           \
      __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1); \
      _mm512_mask_storeu_ps(dst + i, m, WIDEN(_mm256_maskz_loadu_epi16(m, src + i))); \
    }                                                                              \
  }

#define DEFINE_NARROW_AVX512(name, NARROW)                                         \
  AVX512 static void name(uint16_t *dst, const float *src, size_t n) {            \
    for (size_t i = 0; i < n; i += 16) {                                           \
      __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1); \
      _mm256_mask_storeu_epi16(dst + i, m, NARROW(_mm512_maskz_loadu_ps(m, src + i))); \
    }                                                                              \
  }

DEFINE_WIDEN_AVX512(half_to_float_n_avx512, half_widen16)
DEFINE_WIDEN_AVX512(bf16_to_float_n_avx512, bf16_widen16)
DEFINE_NARROW_AVX512(float_to_half_n_avx512, half_narrow16)
DEFINE_NARROW_AVX512(float_to_bf16_n_avx512, bf16_narrow16)

/* ---- Tables ------------------------------------------------------------------------ */

/* Fills k's entries for level lvl; the op order is weft_redop_t's (avg reduces as sum). */
#define FILL(k, lvl)                                                                      \
  do {                                                                                    \
    weft__reduce_fn(*r)[WEFT_NUM_OPS] = (k)->reduce;                                      \
    _Static_assert(WEFT_NUM_OPS == 5, "op order: sum prod max min avg");                  \
    FILL_ROW(r[WEFT_INT8], sum_u8_##lvl, prod_u8_##lvl, max_i8_##lvl, min_i8_##lvl);      \
    FILL_ROW(r[WEFT_UINT8], sum_u8_##lvl, prod_u8_##lvl, max_u8_##lvl, min_u8_##lvl);     \
    FILL_ROW(r[WEFT_INT32], sum_u32_##lvl, prod_u32_##lvl, max_i32_##lvl, min_i32_##lvl); \
    FILL_ROW(r[WEFT_UINT32], sum_u32_##lvl, prod_u32_##lvl, max_u32_##lvl, min_u32_##lvl); \
    FILL_ROW(r[WEFT_INT64], sum_u64_##lvl, prod_u64_##lvl, max_i64_##lvl, min_i64_##lvl); \
    FILL_ROW(r[WEFT_UINT64], sum_u64_##lvl, prod_u64_##lvl, max_u64_##lvl, min_u64_##lvl); \
    FILL_ROW(r[WEFT_FLOAT16], sum_f16_##lvl, prod_f16_##lvl, max_f16_##lvl, min_f16_##lvl); \
    FILL_ROW(r[WEFT_FLOAT32], sum_f32_##lvl, prod_f32_##lvl, max_f32_##lvl, min_f32_##lvl); \
    FILL_ROW(r[WEFT_FLOAT64], sum_f64_##lvl, prod_f64_##lvl, max_f64_##lvl, min_f64_##lvl); \
    FILL_ROW(r[WEFT_BFLOAT16], sum_bf16_##lvl, prod_bf16_##lvl, max_bf16_##lvl,           \
             min_bf16_##lvl);                                                             \
    (k)->half_to_float_n = half_to_float_n_##lvl;                                         \
    (k)->bf16_to_float_n = bf16_to_float_n_##lvl;                                         \
    (k)->float_to_half_n = float_to_half_n_##lvl;                                         \
    (k)->float_to_bf16_n = float_to_bf16_n_##lvl;                                         \
    (k)->level = WEFT__SIMD_##lvl##_LEVEL;                                                \
  } while (0)

#define FILL_ROW(row, s, p, mx, mn) \
  do {                              \
    (row)[WEFT_SUM] = s;            \
    (row)[WEFT_PROD] = p;           \
    (row)[WEFT_MAX] = mx;           \
    (row)[WEFT_MIN] = mn;           \
    (row)[WEFT_AVG] = s;            \
  } while (0)

#define WEFT__SIMD_avx2_LEVEL WEFT__SIMD_AVX2
#define WEFT__SIMD_avx512_LEVEL WEFT__SIMD_AVX512

int weft__simd_fill(struct weft__kernels *k, weft__simd_t level) {
  switch (level) {
    case WEFT__SIMD_AVX2: FILL(k, avx2); return 1;
    case WEFT__SIMD_AVX512: FILL(k, avx512); return 1;
    default: return 0;
  }
}

#else /* not x86-64: only the generic kernels exist */

int weft__simd_fill(struct weft__kernels *k, weft__simd_t level) {
  (void)k;
  (void)level;
  return 0;
}

#endif

/* reduce_simd.c: the AVX2 and AVX-512 reduction kernels that mem/reduce.c picks at run
 * time (the build itself targets baseline x86-64, so these are compiled per function with
 * __attribute__((target(...))) and only ever called after the CPU has been checked).
 *
 * Everything is written with intrinsics rather than left to the auto-vectorizer: the
 * default build is -O2 (autoconf's CFLAGS come after AM_CFLAGS' -O3), where GCC 12
 * vectorizes only loops that need neither an alias check nor a scalar epilogue, i.e.
 * none of ours.
 * - Integer, fp32 and fp64: 256-bit (AVX2) or 512-bit (AVX-512) vectors, two per step,
 *   with emulations where x86 has no instruction: 8-bit products (two 16-bit multiplies),
 *   64-bit products on AVX2 (three vpmuludq), 64-bit min/max on AVX2 (vpcmpgtq + blend,
 *   sign-flipped for unsigned); AVX-512 has vpmullq and vpmaxsq/uq.
 * - fp16 and bf16 are widened, combined in fp32 and narrowed in registers, 16 (AVX2) or
 *   32 (AVX-512) elements per step, with no trip through memory. fp16 uses F16C's
 *   vcvtph2ps / vcvtps2ph with an immediate round-to-nearest-even (it ignores MXCSR's
 *   rounding mode; it quiets NaNs and keeps their top payload bits exactly as half.c
 *   does). bf16 is widened by a shift and narrowed with the same integer
 *   round-to-nearest-even as half.c (add 0x7fff plus the lowest kept bit; NaNs truncated
 *   and made quiet). AVX512_BF16's vcvtneps2bf16 is NOT used: it treats fp32 subnormal
 *   inputs as zero (measured on Zen 4: 0x00018000 gives 0x0000, not 0x0002), so its
 *   results would differ from the generic path.
 *
 * Every kernel gives the generic kernel's bits for every input; tests/test_reduce.c
 * checks that per level. The one freedom, shared with the generic loops: when sum or prod
 * meets two NaNs, which payload comes out (x86 keeps the first source operand's, and the
 * compiler may swap the operands of a commutative add or multiply). dst may be exactly a or b: each vector is loaded from a and b
 * before the same positions of dst are stored. */
#include "mem/kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <string.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

#define OP_SUM(p, q) ((p) + (q))
#define OP_PROD(p, q) ((p) * (q))
#define OP_MAX(p, q) ((p) > (q) ? (p) : (q))
#define OP_MIN(p, q) ((p) < (q) ? (p) : (q))

/* One kernel: two vectors per iteration (two independent chains in flight), then one,
 * then the scalar loop of reduce.c for the last elements (same operation, same bits). */
#define DEFINE_KERNEL(ISA, name, T, VT, LOAD, STORE, VOP, SOP)                  \
  ISA static void name(void *dst, const void *a, const void *b, size_t n) {    \
    enum { W = sizeof(VT) / sizeof(T) };                                        \
    T *d = dst;                                                                 \
    const T *x = a, *y = b;                                                     \
    size_t i = 0;                                                               \
    for (; i + 2 * W <= n; i += 2 * W) {                                        \
      VT x0 = LOAD(x + i), x1 = LOAD(x + i + W);                                \
      VT y0 = LOAD(y + i), y1 = LOAD(y + i + W);                                \
      STORE(d + i, VOP(x0, y0));                                                \
      STORE(d + i + W, VOP(x1, y1));                                            \
    }                                                                           \
    if (i + W <= n) {                                                           \
      STORE(d + i, VOP(LOAD(x + i), LOAD(y + i)));                              \
      i += W;                                                                   \
    }                                                                           \
    for (; i < n; i++) d[i] = (T)SOP(x[i], y[i]);                               \
  }

/* ---- AVX2: integer, fp32 and fp64 --------------------------------------------------- */

#define LD2I(p) _mm256_loadu_si256((const __m256i *)(p))
#define ST2I(p, v) _mm256_storeu_si256((__m256i *)(p), (v))

/* No byte multiply exists: multiply the even and the odd bytes as 16-bit lanes and keep
 * the low byte of each product (the wrap-around). */
AVX2 static inline __m256i prod_u8_v2(__m256i x, __m256i y) {
  __m256i even = _mm256_mullo_epi16(x, y);
  __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(x, 8), _mm256_srli_epi16(y, 8));
  return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0x00ff)),
                         _mm256_slli_epi16(odd, 8));
}

/* No 64-bit multiply either: lo*lo + ((lo*hi + hi*lo) << 32), all modulo 2^64. */
AVX2 static inline __m256i prod_u64_v2(__m256i x, __m256i y) {
  __m256i lo = _mm256_mul_epu32(x, y);
  __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), y),
                                   _mm256_mul_epu32(x, _mm256_srli_epi64(y, 32)));
  return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}

AVX2 static inline __m256i max_i64_v2(__m256i x, __m256i y) {
  return _mm256_blendv_epi8(y, x, _mm256_cmpgt_epi64(x, y));
}

AVX2 static inline __m256i min_i64_v2(__m256i x, __m256i y) {
  return _mm256_blendv_epi8(y, x, _mm256_cmpgt_epi64(y, x));
}

/* Unsigned order is signed order with the sign bits flipped. */
AVX2 static inline __m256i ugt_u64_v2(__m256i x, __m256i y) {
  const __m256i bias = _mm256_set1_epi64x((long long)0x8000000000000000ull);
  return _mm256_cmpgt_epi64(_mm256_xor_si256(x, bias), _mm256_xor_si256(y, bias));
}

AVX2 static inline __m256i max_u64_v2(__m256i x, __m256i y) {
  return _mm256_blendv_epi8(y, x, ugt_u64_v2(x, y));
}

AVX2 static inline __m256i min_u64_v2(__m256i x, __m256i y) {
  return _mm256_blendv_epi8(y, x, ugt_u64_v2(y, x));
}

#define DEFINE_INT_AVX2(sfx, T, ADD, MUL, MAX, MIN)                                 \
  DEFINE_KERNEL(AVX2, sum_##sfx##_avx2, T, __m256i, LD2I, ST2I, ADD, OP_SUM)       \
  DEFINE_KERNEL(AVX2, prod_##sfx##_avx2, T, __m256i, LD2I, ST2I, MUL, OP_PROD)     \
  DEFINE_KERNEL(AVX2, max_##sfx##_avx2, T, __m256i, LD2I, ST2I, MAX, OP_MAX)       \
  DEFINE_KERNEL(AVX2, min_##sfx##_avx2, T, __m256i, LD2I, ST2I, MIN, OP_MIN)

#define DEFINE_SIGNED_AVX2(sfx, T, MAX, MIN)                                        \
  DEFINE_KERNEL(AVX2, max_##sfx##_avx2, T, __m256i, LD2I, ST2I, MAX, OP_MAX)       \
  DEFINE_KERNEL(AVX2, min_##sfx##_avx2, T, __m256i, LD2I, ST2I, MIN, OP_MIN)

DEFINE_INT_AVX2(u8, uint8_t, _mm256_add_epi8, prod_u8_v2, _mm256_max_epu8, _mm256_min_epu8)
DEFINE_INT_AVX2(u32, uint32_t, _mm256_add_epi32, _mm256_mullo_epi32, _mm256_max_epu32,
                _mm256_min_epu32)
DEFINE_INT_AVX2(u64, uint64_t, _mm256_add_epi64, prod_u64_v2, max_u64_v2, min_u64_v2)
DEFINE_SIGNED_AVX2(i8, int8_t, _mm256_max_epi8, _mm256_min_epi8)
DEFINE_SIGNED_AVX2(i32, int32_t, _mm256_max_epi32, _mm256_min_epi32)
DEFINE_SIGNED_AVX2(i64, int64_t, max_i64_v2, min_i64_v2)

/* vmaxps(p, q) is `p > q ? p : q` (q on NaN or equal): the generic OP_MAX, bit for bit;
 * likewise vminps and OP_MIN. */
#define DEFINE_FLOAT_AVX2(sfx, T, VT, LD, ST, PS)                                  \
  DEFINE_KERNEL(AVX2, sum_##sfx##_avx2, T, VT, LD, ST, _mm256_add_##PS, OP_SUM)   \
  DEFINE_KERNEL(AVX2, prod_##sfx##_avx2, T, VT, LD, ST, _mm256_mul_##PS, OP_PROD) \
  DEFINE_KERNEL(AVX2, max_##sfx##_avx2, T, VT, LD, ST, _mm256_max_##PS, OP_MAX)   \
  DEFINE_KERNEL(AVX2, min_##sfx##_avx2, T, VT, LD, ST, _mm256_min_##PS, OP_MIN)

DEFINE_FLOAT_AVX2(f32, float, __m256, _mm256_loadu_ps, _mm256_storeu_ps, ps)
DEFINE_FLOAT_AVX2(f64, double, __m256d, _mm256_loadu_pd, _mm256_storeu_pd, pd)

/* ---- AVX-512: integer, fp32 and fp64 ------------------------------------------------ */

#define LD5I(p) _mm512_loadu_si512((const void *)(p))
#define ST5I(p, v) _mm512_storeu_si512((void *)(p), (v))

AVX512 static inline __m512i prod_u8_v5(__m512i x, __m512i y) {
  __m512i even = _mm512_mullo_epi16(x, y);
  __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(x, 8), _mm512_srli_epi16(y, 8));
  return _mm512_mask_blend_epi8((__mmask64)0xaaaaaaaaaaaaaaaaull, even,
                                _mm512_slli_epi16(odd, 8));
}

#define DEFINE_INT_AVX512(sfx, T, ADD, MUL, MAX, MIN)                              \
  DEFINE_KERNEL(AVX512, sum_##sfx##_avx512, T, __m512i, LD5I, ST5I, ADD, OP_SUM)   \
  DEFINE_KERNEL(AVX512, prod_##sfx##_avx512, T, __m512i, LD5I, ST5I, MUL, OP_PROD) \
  DEFINE_KERNEL(AVX512, max_##sfx##_avx512, T, __m512i, LD5I, ST5I, MAX, OP_MAX)   \
  DEFINE_KERNEL(AVX512, min_##sfx##_avx512, T, __m512i, LD5I, ST5I, MIN, OP_MIN)

#define DEFINE_SIGNED_AVX512(sfx, T, MAX, MIN)                                     \
  DEFINE_KERNEL(AVX512, max_##sfx##_avx512, T, __m512i, LD5I, ST5I, MAX, OP_MAX)   \
  DEFINE_KERNEL(AVX512, min_##sfx##_avx512, T, __m512i, LD5I, ST5I, MIN, OP_MIN)

DEFINE_INT_AVX512(u8, uint8_t, _mm512_add_epi8, prod_u8_v5, _mm512_max_epu8, _mm512_min_epu8)
DEFINE_INT_AVX512(u32, uint32_t, _mm512_add_epi32, _mm512_mullo_epi32, _mm512_max_epu32,
                  _mm512_min_epu32)
DEFINE_INT_AVX512(u64, uint64_t, _mm512_add_epi64, _mm512_mullo_epi64, _mm512_max_epu64,
                  _mm512_min_epu64)
DEFINE_SIGNED_AVX512(i8, int8_t, _mm512_max_epi8, _mm512_min_epi8)
DEFINE_SIGNED_AVX512(i32, int32_t, _mm512_max_epi32, _mm512_min_epi32)
DEFINE_SIGNED_AVX512(i64, int64_t, _mm512_max_epi64, _mm512_min_epi64)

#define DEFINE_FLOAT_AVX512(sfx, T, VT, LD, ST, PS)                                    \
  DEFINE_KERNEL(AVX512, sum_##sfx##_avx512, T, VT, LD, ST, _mm512_add_##PS, OP_SUM)   \
  DEFINE_KERNEL(AVX512, prod_##sfx##_avx512, T, VT, LD, ST, _mm512_mul_##PS, OP_PROD) \
  DEFINE_KERNEL(AVX512, max_##sfx##_avx512, T, VT, LD, ST, _mm512_max_##PS, OP_MAX)   \
  DEFINE_KERNEL(AVX512, min_##sfx##_avx512, T, VT, LD, ST, _mm512_min_##PS, OP_MIN)

DEFINE_FLOAT_AVX512(f32, float, __m512, _mm512_loadu_ps, _mm512_storeu_ps, ps)
DEFINE_FLOAT_AVX512(f64, double, __m512d, _mm512_loadu_pd, _mm512_storeu_pd, pd)

/* ---- AVX2: fp16 / bf16 (8-wide conversions, two vectors per step) ----------------- */

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
    for (; i + 16 <= n; i += 16) {                                                \
      __m256 r0 = VOP(WIDEN(x + i), WIDEN(y + i));                                \
      __m256 r1 = VOP(WIDEN(x + i + 8), WIDEN(y + i + 8));                        \
      NARROW(d + i, r0);                                                          \
      NARROW(d + i + 8, r1);                                                      \
    }                                                                             \
    for (; i + 8 <= n; i += 8) NARROW(d + i, VOP(WIDEN(x + i), WIDEN(y + i)));    \
    if (i == n) return;                                                           \
    uint16_t tx[8] = {0}, ty[8] = {0}, td[8];                                     \
    memcpy(tx, x + i, (n - i) * 2);                                               \
    memcpy(ty, y + i, (n - i) * 2);                                               \
    NARROW(td, VOP(WIDEN(tx), WIDEN(ty)));                                        \
    memcpy(d + i, td, (n - i) * 2);                                               \
  }

/* Used for fp16 only; bf16 has its own kernels below. */
#define DEFINE_16BIT_AVX2_OPS(sfx, WIDEN, NARROW)                       \
  DEFINE_16BIT_AVX2(sum_##sfx##_avx2, WIDEN, NARROW, _mm256_add_ps)     \
  DEFINE_16BIT_AVX2(prod_##sfx##_avx2, WIDEN, NARROW, _mm256_mul_ps)    \
  DEFINE_16BIT_AVX2(max_##sfx##_avx2, WIDEN, NARROW, _mm256_max_ps)     \
  DEFINE_16BIT_AVX2(min_##sfx##_avx2, WIDEN, NARROW, _mm256_min_ps)

/* _mm256_max_ps(p, q) is `p > q ? p : q` (q on NaN or equal), the generic OP_MAX. */
DEFINE_16BIT_AVX2_OPS(f16, half_widen8, half_narrow8)

/* bf16 reductions take 16 elements per step, widened by interleaving with zeros
 * (vpunpcklwd / vpunpckhwd put each bf16 in the top half of an fp32 lane) and narrowed
 * by vpackusdw, which undoes that interleave lane for lane: no shuffles across lanes.
 * sum and prod need no NaN quieting on the way in (the FPU returns signalling NaNs
 * quiet); max and min do, as they return an operand, and then the narrowing is a plain
 * truncation: the result is one of the widened, exactly representable inputs. */
AVX2 static inline __m256 bf16_lo_v2(__m256i h) {
  return _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), h));
}

AVX2 static inline __m256 bf16_hi_v2(__m256i h) {
  return _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), h));
}

AVX2 static inline __m256 bf16_quiet_v2(__m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  __m256i nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f800000));
  return _mm256_castsi256_ps(
      _mm256_or_si256(u, _mm256_and_si256(nan, _mm256_set1_epi32(0x00400000))));
}

/* half.c's float_to_bf16, left in the top 16 bits of each lane. */
AVX2 static inline __m256i bf16_round_v2(__m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd);
  __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), nan));
}

AVX2 static inline __m256i bf16_pack_v2(__m256i lo, __m256i hi) {
  return _mm256_packus_epi32(_mm256_srli_epi32(lo, 16), _mm256_srli_epi32(hi, 16));
}

AVX2 static inline __m256i bf16_sum16_v2(__m256i x, __m256i y) {
  __m256 lo = _mm256_add_ps(bf16_lo_v2(x), bf16_lo_v2(y));
  __m256 hi = _mm256_add_ps(bf16_hi_v2(x), bf16_hi_v2(y));
  return bf16_pack_v2(bf16_round_v2(lo), bf16_round_v2(hi));
}

AVX2 static inline __m256i bf16_prod16_v2(__m256i x, __m256i y) {
  __m256 lo = _mm256_mul_ps(bf16_lo_v2(x), bf16_lo_v2(y));
  __m256 hi = _mm256_mul_ps(bf16_hi_v2(x), bf16_hi_v2(y));
  return bf16_pack_v2(bf16_round_v2(lo), bf16_round_v2(hi));
}

#define BF16_PICK16_V2(name, PICK)                                                     \
  AVX2 static inline __m256i name(__m256i x, __m256i y) {                             \
    __m256 lo = PICK(bf16_quiet_v2(bf16_lo_v2(x)), bf16_quiet_v2(bf16_lo_v2(y)));     \
    __m256 hi = PICK(bf16_quiet_v2(bf16_hi_v2(x)), bf16_quiet_v2(bf16_hi_v2(y)));     \
    return bf16_pack_v2(_mm256_castps_si256(lo), _mm256_castps_si256(hi));           \
  }

BF16_PICK16_V2(bf16_max16_v2, _mm256_max_ps)
BF16_PICK16_V2(bf16_min16_v2, _mm256_min_ps)

#define DEFINE_BF16_AVX2(name, VOP16)                                         \
  AVX2 static void name(void *dst, const void *a, const void *b, size_t n) { \
    uint16_t *d = dst;                                                        \
    const uint16_t *x = a, *y = b;                                            \
    size_t i = 0;                                                             \
    for (; i + 16 <= n; i += 16)                                              \
      ST2I(d + i, VOP16(LD2I(x + i), LD2I(y + i)));                           \
    if (i == n) return;                                                       \
    uint16_t tx[16] = {0}, ty[16] = {0}, td[16];                              \
    memcpy(tx, x + i, (n - i) * 2);                                           \
    memcpy(ty, y + i, (n - i) * 2);                                           \
    ST2I(td, VOP16(LD2I(tx), LD2I(ty)));                                      \
    memcpy(d + i, td, (n - i) * 2);                                           \
  }

DEFINE_BF16_AVX2(sum_bf16_avx2, bf16_sum16_v2)
DEFINE_BF16_AVX2(prod_bf16_avx2, bf16_prod16_v2)
DEFINE_BF16_AVX2(max_bf16_avx2, bf16_max16_v2)
DEFINE_BF16_AVX2(min_bf16_avx2, bf16_min16_v2)

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

/* WEFT_AVG's division (weft__avg_finalize): vector division is IEEE's correctly rounded
 * quotient, as the generic loops' scalar one is, so the bits are theirs; fp16 and bf16 are
 * widened and narrowed by the same helpers as this level's array conversions, which the
 * generic loops call. A scalar division per element ran 1.8x (fp32) to 6x (bf16) the time
 * of the reduction before it (256 KiB, AMD EPYC VM). */
#define DEFINE_DIVIDE_AVX2(name, T, VT, LOADU, STOREU, SET1, DIV)   \
  AVX2 static void name(void *buf, size_t n, int divisor) {         \
    enum { W = sizeof(VT) / sizeof(T) };                            \
    T *p = buf;                                                     \
    const T k = (T)divisor;                                         \
    const VT kv = SET1(k);                                          \
    size_t i = 0;                                                   \
    for (; i + W <= n; i += W) STOREU(p + i, DIV(LOADU(p + i), kv)); \
    for (; i < n; i++) p[i] = p[i] / k;                             \
  }

DEFINE_DIVIDE_AVX2(divide_f32_avx2, float, __m256, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps,
                   _mm256_div_ps)
DEFINE_DIVIDE_AVX2(divide_f64_avx2, double, __m256d, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_set1_pd,
                   _mm256_div_pd)

#define DEFINE_DIVIDE_16BIT_AVX2(name, WIDEN, NARROW)                          \
  AVX2 static void name(void *buf, size_t n, int divisor) {                   \
    uint16_t *p = buf;                                                         \
    const __m256 kv = _mm256_set1_ps((float)divisor);                          \
    size_t i = 0;                                                              \
    for (; i + 8 <= n; i += 8) NARROW(p + i, _mm256_div_ps(WIDEN(p + i), kv)); \
    if (i == n) return;                                                        \
    uint16_t t[8] = {0};                                                       \
    memcpy(t, p + i, (n - i) * 2);                                             \
    NARROW(t, _mm256_div_ps(WIDEN(t), kv));                                    \
    memcpy(p + i, t, (n - i) * 2);                                             \
  }

DEFINE_DIVIDE_16BIT_AVX2(divide_f16_avx2, half_widen8, half_narrow8)

/* bf16 as its sum: interleaved with zeros, 16 per step; no NaN quieting on the way in
 * (the division returns a signalling NaN quiet, as the generic widening makes it). */
AVX2 static inline __m256i bf16_div16_v2(__m256i x, __m256 kv) {
  __m256 lo = _mm256_div_ps(bf16_lo_v2(x), kv), hi = _mm256_div_ps(bf16_hi_v2(x), kv);
  return bf16_pack_v2(bf16_round_v2(lo), bf16_round_v2(hi));
}

AVX2 static void divide_bf16_avx2(void *buf, size_t n, int divisor) {
  uint16_t *p = buf;
  const __m256 kv = _mm256_set1_ps((float)divisor);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) ST2I(p + i, bf16_div16_v2(LD2I(p + i), kv));
  if (i == n) return;
  uint16_t t[16] = {0};
  memcpy(t, p + i, (n - i) * 2);
  ST2I(t, bf16_div16_v2(LD2I(t), kv));
  memcpy(p + i, t, (n - i) * 2);
}

/* ---- AVX-512: fp16 / bf16 (16-wide conversions), tails by masked loads/stores ----- */

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

/* bf16 as on AVX2 (interleave with zeros, pack back), 32 elements per step. */
AVX512 static inline __m512 bf16_lo_v5(__m512i h) {
  return _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), h));
}

AVX512 static inline __m512 bf16_hi_v5(__m512i h) {
  return _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), h));
}

AVX512 static inline __m512 bf16_quiet_v5(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  __mmask16 nan = _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7f800000));
  return _mm512_castsi512_ps(_mm512_mask_or_epi32(u, nan, u, _mm512_set1_epi32(0x00400000)));
}

AVX512 static inline __m512i bf16_round_v5(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd);
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
}

AVX512 static inline __m512i bf16_pack_v5(__m512i lo, __m512i hi) {
  return _mm512_packus_epi32(_mm512_srli_epi32(lo, 16), _mm512_srli_epi32(hi, 16));
}

AVX512 static inline __m512i bf16_sum32_v5(__m512i x, __m512i y) {
  __m512 lo = _mm512_add_ps(bf16_lo_v5(x), bf16_lo_v5(y));
  __m512 hi = _mm512_add_ps(bf16_hi_v5(x), bf16_hi_v5(y));
  return bf16_pack_v5(bf16_round_v5(lo), bf16_round_v5(hi));
}

AVX512 static inline __m512i bf16_prod32_v5(__m512i x, __m512i y) {
  __m512 lo = _mm512_mul_ps(bf16_lo_v5(x), bf16_lo_v5(y));
  __m512 hi = _mm512_mul_ps(bf16_hi_v5(x), bf16_hi_v5(y));
  return bf16_pack_v5(bf16_round_v5(lo), bf16_round_v5(hi));
}

#define BF16_PICK32_V5(name, PICK)                                                     \
  AVX512 static inline __m512i name(__m512i x, __m512i y) {                           \
    __m512 lo = PICK(bf16_quiet_v5(bf16_lo_v5(x)), bf16_quiet_v5(bf16_lo_v5(y)));     \
    __m512 hi = PICK(bf16_quiet_v5(bf16_hi_v5(x)), bf16_quiet_v5(bf16_hi_v5(y)));     \
    return bf16_pack_v5(_mm512_castps_si512(lo), _mm512_castps_si512(hi));           \
  }

BF16_PICK32_V5(bf16_max32_v5, _mm512_max_ps)
BF16_PICK32_V5(bf16_min32_v5, _mm512_min_ps)

#define DEFINE_BF16_AVX512(name, VOP32)                                                    \
  AVX512 static void name(void *dst, const void *a, const void *b, size_t n) {            \
    uint16_t *d = dst;                                                                     \
    const uint16_t *x = a, *y = b;                                                         \
    for (size_t i = 0; i < n; i += 32) {                                                   \
      __mmask32 m = n - i >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (n - i)) - 1); \
      __m512i r = VOP32(_mm512_maskz_loadu_epi16(m, x + i), _mm512_maskz_loadu_epi16(m, y + i)); \
      _mm512_mask_storeu_epi16(d + i, m, r);                                               \
    }                                                                                      \
  }

DEFINE_BF16_AVX512(sum_bf16_avx512, bf16_sum32_v5)
DEFINE_BF16_AVX512(prod_bf16_avx512, bf16_prod32_v5)
DEFINE_BF16_AVX512(max_bf16_avx512, bf16_max32_v5)
DEFINE_BF16_AVX512(min_bf16_avx512, bf16_min32_v5)

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

/* WEFT_AVG's division, as on AVX2; tails by masked loads and stores. */
#define DEFINE_DIVIDE_AVX512(name, T, VT, MASK_T, W, MLOAD, MSTORE, SET1, DIV)     \
  AVX512 static void name(void *buf, size_t n, int divisor) {                     \
    T *p = buf;                                                                    \
    const VT kv = SET1((T)divisor);                                                \
    for (size_t i = 0; i < n; i += W) {                                            \
      MASK_T m = n - i >= W ? (MASK_T)((1u << W) - 1) : (MASK_T)((1u << (n - i)) - 1); \
      MSTORE(p + i, m, DIV(MLOAD(m, p + i), kv));                                  \
    }                                                                              \
  }

DEFINE_DIVIDE_AVX512(divide_f32_avx512, float, __m512, __mmask16, 16, _mm512_maskz_loadu_ps,
                     _mm512_mask_storeu_ps, _mm512_set1_ps, _mm512_div_ps)
DEFINE_DIVIDE_AVX512(divide_f64_avx512, double, __m512d, __mmask8, 8, _mm512_maskz_loadu_pd,
                     _mm512_mask_storeu_pd, _mm512_set1_pd, _mm512_div_pd)

#define DEFINE_DIVIDE_16BIT_AVX512(name, WIDEN, NARROW)                                  \
  AVX512 static void name(void *buf, size_t n, int divisor) {                           \
    uint16_t *p = buf;                                                                   \
    const __m512 kv = _mm512_set1_ps((float)divisor);                                    \
    for (size_t i = 0; i < n; i += 16) {                                                 \
      __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1); \
      __m512 q = _mm512_div_ps(WIDEN(_mm256_maskz_loadu_epi16(m, p + i)), kv);          \
      _mm256_mask_storeu_epi16(p + i, m, NARROW(q));                                     \
    }                                                                                    \
  }

DEFINE_DIVIDE_16BIT_AVX512(divide_f16_avx512, half_widen16, half_narrow16)

/* bf16 as on AVX2, 32 per step. */
AVX512 static void divide_bf16_avx512(void *buf, size_t n, int divisor) {
  uint16_t *p = buf;
  const __m512 kv = _mm512_set1_ps((float)divisor);
  for (size_t i = 0; i < n; i += 32) {
    __mmask32 m = n - i >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (n - i)) - 1);
    __m512i x = _mm512_maskz_loadu_epi16(m, p + i);
    __m512 lo = _mm512_div_ps(bf16_lo_v5(x), kv), hi = _mm512_div_ps(bf16_hi_v5(x), kv);
    _mm512_mask_storeu_epi16(p + i, m, bf16_pack_v5(bf16_round_v5(lo), bf16_round_v5(hi)));
  }
}

/* ---- Tables ------------------------------------------------------------------------ */

/* Fills k's entries for level lvl (the integer divisions stay NULL: reduce.c gives them
 * the generic loops); the op order is weft_redop_t's (avg reduces as sum). */
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
    (k)->divide[WEFT_FLOAT16] = divide_f16_##lvl;                                         \
    (k)->divide[WEFT_FLOAT32] = divide_f32_##lvl;                                         \
    (k)->divide[WEFT_FLOAT64] = divide_f64_##lvl;                                         \
    (k)->divide[WEFT_BFLOAT16] = divide_bf16_##lvl;                                       \
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

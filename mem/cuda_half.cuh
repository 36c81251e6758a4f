/* cuda_half.cuh: fp16 / bf16 <-> fp32 on the device, the same bits as mem/half.c.
 *
 * Integer operations only, so the result depends on no FPU mode (-ftz, the fp16 units'
 * NaN rules): cuda_fp16.h's __float2half_rn is round-to-nearest-even too, but its NaN
 * output is a canonical NaN rather than the host's payload-keeping quiet NaN, so it is not
 * used. Rules, as on the host: narrowing rounds to nearest, ties to even; overflow gives
 * infinity; results below the smallest normal become correctly rounded subnormals; a NaN
 * stays a NaN with its quiet bit set and its top payload bits kept. Widening is exact,
 * except that a signalling NaN comes back quiet. */
#ifndef WEFT_MEM_CUDA_HALF_CUH
#define WEFT_MEM_CUDA_HALF_CUH
#include <stdint.h>

namespace weft_cuda {

/* fp16 fields: 1 sign, 5 exponent (bias 15), 10 mantissa. fp32: 1, 8 (bias 127), 23. */
__device__ __forceinline__ float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t mag = h & 0x7fffu;
  uint32_t bits;
  if (mag >= 0x7c00u) {
    /* Infinity or NaN: exponent 255, payload moved up, NaN made quiet. */
    bits = 0x7f800000u | ((mag & 0x3ffu) << 13) | (mag > 0x7c00u ? 0x00400000u : 0u);
  } else if (mag >= 0x0400u) {
    bits = (mag << 13) + ((uint32_t)(127 - 15) << 23); /* normal: rebias */
  } else if (mag != 0) {
    /* Subnormal m * 2^-24: shift the leading one to bit 10 (the implicit bit), lowering
     * the exponent of the smallest normal (2^-14, biased 113) by as many places. */
    int shift = __clz(mag) - 21;
    bits = ((uint32_t)(113 - shift) << 23) | (((mag << shift) & 0x3ffu) << 13);
  } else {
    bits = 0;
  }
  return __uint_as_float(sign | bits);
}

/* Round-to-nearest-even of m >> shift (shift >= 1), in integers. */
__device__ __forceinline__ uint32_t shift_rne(uint32_t m, int shift) {
  if (shift > 31) return 0; /* m < 2^24 <= half the unit: rounds to zero */
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  return q + (rem > half || (rem == half && (q & 1u)));
}

__device__ __forceinline__ uint16_t float_to_half(float f) {
  uint32_t u = __float_as_uint(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) /* NaN: quiet, top 9 payload bits kept (half.c's mask) */
    return (uint16_t)(sign | 0x7e00u | ((mag >> 13) & 0x01ffu));
  if (mag >= 0x47800000u) return (uint16_t)(sign | 0x7c00u); /* |f| >= 2^16, or inf */
  if (mag >= 0x38800000u) {
    /* Normal result: rebias, then round the 13 dropped bits to nearest even; a carry into
     * the exponent is the right answer (next binade, or infinity from 65520 up). */
    uint32_t odd = (mag >> 13) & 1u;
    return (uint16_t)(sign | ((mag - ((uint32_t)(127 - 15) << 23) + 0x0fffu + odd) >> 13));
  }
  /* Subnormal result, |f| < 2^-14: the value in units of 2^-24 (the fp16 subnormal ulp),
   * rounded; a carry to 0x400 is the smallest normal, which is right. fp32 exponent e
   * (1 for fp32 subnormals) puts the 24-bit significand m at m * 2^(e - 150). */
  uint32_t e = mag >> 23;
  uint32_t m = (mag & 0x7fffffu) | (e ? 0x800000u : 0u);
  int shift = 126 - (int)(e ? e : 1);
  return (uint16_t)(sign | shift_rne(m, shift));
}

/* bf16 is the top half of an fp32: widening is a shift, a NaN gets its quiet bit. */
__device__ __forceinline__ float bf16_to_float(uint16_t b) {
  uint32_t quiet = (b & 0x7fffu) > 0x7f80u ? 0x0040u : 0u;
  return __uint_as_float((uint32_t)(b | quiet) << 16);
}

/* Round the low 16 bits to nearest even (the carry handles the next binade, overflow and
 * subnormals); a NaN is truncated and made quiet instead, so it cannot round to inf. */
__device__ __forceinline__ uint16_t float_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u | 0x00400000u) >> 16);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

} /* namespace weft_cuda */
#endif

/* reduce_nt.c: see reduce_nt.h.
 *
 * Why fused: the direct all-reduce first reduced 8 KiB pieces into a scratch in L1, then
 * wrote the scratch to each output with non-temporal stores. Reads and non-temporal writes then alternate in
 * bursts, and 2-rank all-reduce at 32-256 MiB read 8.0-8.6 GB/s busbw against the fused
 * floor's 12.5-13.5 (0.61-0.65). One loop that loads the inputs and stores every output
 * per 64-byte line keeps both kinds of traffic in flight at once, as the floor does.
 * SSE2 is enough: the loop is bound by memory, not by arithmetic. */
#include <stdint.h>
#include "mem/reduce_nt.h"

#if defined(__x86_64__)
#include <emmintrin.h>

/* One element, scalar, in the vector loop's order (head and tail of the range). */
#define SCALAR_ONE(T, i)                                                    \
  do {                                                                      \
    T acc_ = ((const T *)in[0])[i];                                         \
    for (int k_ = 1; k_ < nin; k_++) {                                      \
      T v_ = ((const T *)in[k_])[i];                                        \
      acc_ = op == WEFT_PROD ? acc_ * v_ : acc_ + v_;                       \
    }                                                                       \
    if (op == WEFT_AVG) acc_ = acc_ / (T)nin;                               \
    for (int j_ = 0; j_ < nout; j_++) ((T *)out[j_])[i] = acc_;             \
  } while (0)

/* T: element type; V: SSE vector type; W: elements per vector; LOAD, ADD, MUL, DIV,
 * SET1, NTSTORE: the intrinsics. Four vectors (64 bytes) per step. */
#define DEFINE_NT(name, T, V, W, LOAD, ADD, MUL, DIV, SET1, NTSTORE)                  \
  static void name(char *const *out, int nout, char *const *in, int nin, size_t count,  \
                   weft_redop_t op) {                                                    \
    size_t i = 0;                                                                        \
    while (i < count && ((uintptr_t)(out[0] + i * sizeof(T)) & 15) != 0) {               \
      SCALAR_ONE(T, i);                                                                  \
      i++;                                                                               \
    }                                                                                    \
    const V div = SET1((T)nin);                                                          \
    for (; i + 4 * W <= count; i += 4 * W) {                                             \
      V a[4];                                                                            \
      for (int q = 0; q < 4; q++) a[q] = LOAD((const T *)in[0] + i + q * W);             \
      for (int k = 1; k < nin; k++)                                                      \
        for (int q = 0; q < 4; q++) {                                                    \
          V v = LOAD((const T *)in[k] + i + q * W);                                      \
          a[q] = op == WEFT_PROD ? MUL(a[q], v) : ADD(a[q], v);                          \
        }                                                                                \
      if (op == WEFT_AVG)                                                                \
        for (int q = 0; q < 4; q++) a[q] = DIV(a[q], div);                               \
      for (int j = 0; j < nout; j++)                                                     \
        for (int q = 0; q < 4; q++) NTSTORE((T *)out[j] + i + q * W, a[q]);               \
    }                                                                                    \
    for (; i < count; i++) SCALAR_ONE(T, i);                                             \
  }

DEFINE_NT(nt_f32, float, __m128, 4, _mm_loadu_ps, _mm_add_ps, _mm_mul_ps, _mm_div_ps,
              _mm_set1_ps, _mm_stream_ps)
DEFINE_NT(nt_f64, double, __m128d, 2, _mm_loadu_pd, _mm_add_pd, _mm_mul_pd, _mm_div_pd,
              _mm_set1_pd, _mm_stream_pd)

int weft__reduce_nt(char *const *out, int nout, char *const *in, int nin, size_t count,
                        weft_datatype_t dt, weft_redop_t op) {
  if (op != WEFT_SUM && op != WEFT_PROD && op != WEFT_AVG) return 0;
  if (dt != WEFT_FLOAT32 && dt != WEFT_FLOAT64) return 0;
  for (int j = 1; j < nout; j++)
    if ((((uintptr_t)out[j] ^ (uintptr_t)out[0]) & 15) != 0) return 0;
  if (dt == WEFT_FLOAT32) nt_f32(out, nout, in, nin, count, op);
  else nt_f64(out, nout, in, nin, count, op);
  return 1;
}
#else
int weft__reduce_nt(char *const *out, int nout, char *const *in, int nin, size_t count,
                        weft_datatype_t dt, weft_redop_t op) {
  return 0;
}
#endif

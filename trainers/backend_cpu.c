/* trainers/backend_cpu.c: the CPU backend of the reference GPT (see backend.h).
 *
 * Matrix products go to OpenBLAS's cblas_sgemm, where nearly all of the FLOPs are; the
 * element-wise kernels are plain loops the compiler vectorises. Causal attention has its own
 * register-blocked kernels (backend_cpu.h): they compute only the causal triangle, where
 * sgemm on each head's full 128 x 128 square spent as long packing as multiplying. OpenBLAS runs on ONE thread:
 * its threaded sgemm splits work differently with the thread count and machine load, which
 * changes the order of additions and so the bits of the result; one thread makes a run
 * bit-reproducible (same seed, same binary => same losses), and the data-parallel trainers
 * get their parallelism from ranks, one core each. openblas_set_num_threads(1) is called
 * on first use; OPENBLAS_NUM_THREADS in the environment is overridden.
 */
#include "trainers/backend_cpu.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trainers/simd_clones.h"

static void cpu_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* The element-wise kernels (GELU is the largest: 4*d values per token per layer, twice),
 * LayerNorm and attention are compiled for AVX-512 and AVX2 too (SIMD_CLONES). */

SIMD_CLONES static void cpu_bias_add(float *y, const float *bias, int rows, int n) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < n; j++)
      y[(size_t)r * n + j] += bias[j];
}

SIMD_CLONES static void cpu_bias_grad(float *dbias, const float *dy, int rows, int n) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < n; j++)
      dbias[j] += dy[(size_t)r * n + j];
}

SIMD_CLONES static void cpu_add(float *y, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    y[i] += x[i];
}

SIMD_CLONES static void cpu_residual_bias(float *y, const float *x, const float *bias, int rows, int n) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < n; j++)
      y[(size_t)r * n + j] = x[(size_t)r * n + j] + bias[j];
}

/* Row sums in 16 partial sums (then added up in lane order), so the loops vectorise
 * without reassociating one chain; with a single chain of dependent adds a 256-wide row
 * took 4 cycles per element. The partial sums are one GCC vector of 16 floats (a zmm on
 * AVX-512, two ymm on AVX2, four xmm otherwise): written as 16 scalars in an array, GCC
 * vectorised the loop over the row's blocks instead, 16 blocks at a time through
 * transposing shuffles, and the backward took 4.3x as long (2048 rows of 256, one core of
 * the AMD EPYC VM: 760 against 177 us per call; 384 wide 1178 against 333), 3.3% of a
 * small-model training step (small model, 1 rank, 8 alternating launches of each build:
 * median step 271.3 -> 267.7 ms). The sums run in the same order as before; only the
 * products now fuse into their adds (FMA), so results move in the last bits (the small
 * model's losses agree to 6 decimals). */
#define LN_LANES 16
typedef float ln_vec __attribute__((vector_size(LN_LANES * sizeof(float))));

/* Unaligned loads and stores of one ln_vec (by pointer: a vector argument's ABI differs
 * between the target clones). */
static inline void ln_load(ln_vec *v, const float *p) { memcpy(v, p, sizeof *v); }
static inline void ln_store(float *p, const ln_vec *v) { memcpy(p, v, sizeof *v); }

static inline float ln_sum(const float *x, int d) {
  ln_vec part = {0}, v;
  float s = 0.0f;
  int nb = d / LN_LANES * LN_LANES;
  for (int j = 0; j < nb; j += LN_LANES) {
    ln_load(&v, x + j);
    part += v;
  }
  for (int j = nb; j < d; j++) s += x[j];
  for (int l = 0; l < LN_LANES; l++) s += part[l];
  return s;
}

static inline float ln_sqdev(const float *x, float mu, int d) {
  ln_vec part = {0}, v;
  float s = 0.0f;
  int nb = d / LN_LANES * LN_LANES;
  for (int j = 0; j < nb; j += LN_LANES) {
    ln_load(&v, x + j);
    part += (v - mu) * (v - mu);
  }
  for (int j = nb; j < d; j++) s += (x[j] - mu) * (x[j] - mu);
  for (int l = 0; l < LN_LANES; l++) s += part[l];
  return s;
}

SIMD_CLONES static void cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *x, const float *w,
                                          const float *b, int rows, int d) {
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * d;
    float *o = out + (size_t)r * d;
    float mu = ln_sum(xr, d) / (float)d;
    float rs = 1.0f / sqrtf(ln_sqdev(xr, mu, d) / (float)d + 1e-5f);
    for (int j = 0; j < d; j++)
      o[j] = (xr[j] - mu) * rs * w[j] + b[j];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

/* With xhat = (x - mean) * rstd and g = dout * w:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
SIMD_CLONES static void cpu_layernorm_bwd(float *dx, float *dw, float *db, const float *dout, const float *x,
                                          const float *w, const float *mean, const float *rstd, int rows, int d) {
  int nb = d / LN_LANES * LN_LANES;
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * d, *dr = dout + (size_t)r * d;
    float *dxr = dx + (size_t)r * d;
    float mu = mean[r], rs = rstd[r], gsum = 0.0f, gxsum = 0.0f;
    ln_vec gp = {0}, gxp = {0}, xv, dv, wv, acc;
    for (int j = 0; j < nb; j += LN_LANES) {
      ln_load(&xv, xr + j);
      ln_load(&dv, dr + j);
      ln_load(&wv, w + j);
      ln_vec xhat = (xv - mu) * rs, g = dv * wv;
      gp += g;
      gxp += g * xhat;
    }
    for (int j = nb; j < d; j++) {
      float xhat = (xr[j] - mu) * rs, g = dr[j] * w[j];
      gsum += g;
      gxsum += g * xhat;
    }
    for (int l = 0; l < LN_LANES; l++) {
      gsum += gp[l];
      gxsum += gxp[l];
    }
    gsum /= (float)d;
    gxsum /= (float)d;
    for (int j = 0; j < nb; j += LN_LANES) {
      ln_load(&xv, xr + j);
      ln_load(&dv, dr + j);
      ln_load(&wv, w + j);
      ln_vec xhat = (xv - mu) * rs;
      ln_load(&acc, dw + j);
      acc += dv * xhat;
      ln_store(dw + j, &acc);
      ln_load(&acc, db + j);
      acc += dv;
      ln_store(db + j, &acc);
      ln_load(&acc, dxr + j);
      acc += rs * (dv * wv - gsum - xhat * gxsum);
      ln_store(dxr + j, &acc);
    }
    for (int j = nb; j < d; j++) {
      float xhat = (xr[j] - mu) * rs;
      dw[j] += dr[j] * xhat;
      db[j] += dr[j];
      dxr[j] += rs * (dr[j] * w[j] - gsum - xhat * gxsum);
    }
  }
}

#define GELU_C 0.7978845608028654f /* sqrt(2 / pi) */

/* e^r * 2^k for |r| <= ln2 / 2 and k an integer-valued float in -126 .. 127: e^r by its
 * degree-7 Taylor polynomial (error below 1e-8 there), 2^k written into the exponent bits.
 * The common tail of the vectorisable exponentials below (GELU's tanh, softmax's exp), which
 * differ only in how they clamp and reduce their argument. */
static inline __attribute__((always_inline)) float exp_reduced(float k, float r) {
  float p = 1.0f / 720 + r * (1.0f / 5040);
  p = 1.0f / 24 + r * (1.0f / 120 + r * p);
  p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * p)));
  int32_t bits = ((int32_t)k + 127) << 23;
  float two_k;
  memcpy(&two_k, &bits, sizeof(two_k));
  return p * two_k;
}

/* tanh for GELU, to about 2e-7 absolute: tanh(u) = 1 - 2 / (e^{2u} + 1), with e^y as
 * 2^k * exp(r), k = round(y / ln 2), |r| <= ln2 / 2, and exp(r) by its degree-7 Taylor
 * polynomial (error below 1e-8 there, so the steps between k's stay below float noise).
 * glibc's tanhf is a call the compiler cannot vectorise: it took a third of a training
 * step; this vectorises. u is clamped to +-9, where tanh is 1 to float precision. */
static inline float gelu_tanh(float u) {
  u = u > 9.0f ? 9.0f : u < -9.0f ? -9.0f : u;
  float t = 2.0f * u * 1.4426950409f;
  float k = (t + 12582912.0f) - 12582912.0f; /* round to nearest: adding 1.5 * 2^23 */
  float r = (t - k) * 0.6931471806f;
  return 1.0f - 2.0f / (exp_reduced(k, r) + 1.0f);
}


/* Two loops rather than a test of dgelu per value: a branch in the loop kept GCC from
 * vectorising it. Each value is read before its dgelu is written, so dgelu == x is safe
 * (and stays vectorised: the run-time alias check lets an exact alias through). */
SIMD_CLONES static void cpu_gelu_fwd(float *out, float *dgelu, const float *x, size_t n) {
  if (!dgelu) {
    for (size_t i = 0; i < n; i++) {
      float v = x[i];
      out[i] = 0.5f * v * (1.0f + gelu_tanh(GELU_C * (v + 0.044715f * v * v * v)));
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    float v = x[i], th = gelu_tanh(GELU_C * (v + 0.044715f * v * v * v));
    out[i] = 0.5f * v * (1.0f + th);
    dgelu[i] = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * GELU_C * (1.0f + 3.0f * 0.044715f * v * v);
  }
}

/* Row by row, so the bias gradient sums each column in row order, as cpu_bias_grad does;
 * two loops for the reason cpu_gelu_fwd has them. */
SIMD_CLONES static void cpu_gelu_bwd(float *dx, float *dbias, const float *dgelu, const float *dout, int rows,
                                     int width) {
  for (int r = 0; r < rows; r++) {
    const float *g = dgelu + (size_t)r * width, *d = dout + (size_t)r * width;
    float *o = dx + (size_t)r * width;
    if (!dbias) {
      for (int j = 0; j < width; j++) o[j] = g[j] * d[j];
      continue;
    }
    for (int j = 0; j < width; j++) {
      float v = g[j] * d[j];
      o[j] = v;
      dbias[j] += v;
    }
  }
}

static void cpu_softmax_causal_fwd(float *p, const float *s, int t, float scale) {
  for (int i = 0; i < t; i++) {
    const float *si = s + (size_t)i * t;
    float *pi = p + (size_t)i * t, mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j <= i; j++)
      mx = si[j] > mx ? si[j] : mx;
    for (int j = 0; j <= i; j++) {
      pi[j] = expf(scale * (si[j] - mx));
      sum += pi[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j <= i; j++)
      pi[j] *= inv;
    for (int j = i + 1; j < t; j++)
      pi[j] = 0.0f;
  }
}

static void cpu_softmax_causal_bwd(float *ds, const float *p, const float *dp, int t, float scale) {
  for (int i = 0; i < t; i++) {
    const float *pi = p + (size_t)i * t, *dpi = dp + (size_t)i * t;
    float *dsi = ds + (size_t)i * t, dot = 0.0f;
    for (int j = 0; j <= i; j++)
      dot += pi[j] * dpi[j];
    for (int j = 0; j <= i; j++)
      dsi[j] = scale * pi[j] * (dpi[j] - dot);
    for (int j = i + 1; j < t; j++)
      dsi[j] = 0.0f;
  }
}

/* The loss sums in double so it does not depend on the batch size's rounding. */
static double cpu_cross_entropy(float *dlogits, const float *logits, const int *targets, int rows, int v) {
  double total = 0.0;
  for (int r = 0; r < rows; r++) {
    const float *l = logits + (size_t)r * v;
    float mx = -INFINITY;
    for (int j = 0; j < v; j++)
      mx = l[j] > mx ? l[j] : mx;
    double sum = 0.0;
    for (int j = 0; j < v; j++)
      sum += exp((double)l[j] - mx);
    double logz = log(sum) + mx;
    total += logz - l[targets[r]];
    if (!dlogits) continue;
    float *dl = dlogits + (size_t)r * v;
    for (int j = 0; j < v; j++)
      dl[j] = (float)(exp((double)l[j] - logz) / rows);
    dl[targets[r]] -= 1.0f / (float)rows;
  }
  return total / rows;
}

static const gpt_backend cpu_backend;

/* ---------------------------------------------------------------- causal attention
 *
 * Per (sequence, head), rows in blocks of ATT_RB = 4: S = Q K^T only for columns j <= the
 * block's last row, softmax row by row while the block is in L1, Y = P V over j <= i. The
 * backward mirrors it (dP = dY V^T, dS, dQ = dS K per row block; then dK = dS^T Q and
 * dV = P^T dY per block of 4 output rows, summing over i >= j). Every inner product is a
 * register-blocked kernel (att_kernels.inc): 4 rows x up to 4 vectors of accumulators (16
 * floats a vector with AVX-512, 8 without), one broadcast per row and one load per vector per
 * step, so a step is up to 16 multiply-adds for 8 loads.
 * Operands are first packed, a sequence at a time for all its heads (one pass in order over
 * the sequence's rows): K (the forward) or V (the backward) transposed to [hd][Tp] per head
 * (Tp = T rounded up to 16, zero columns) for the row-times-matrix products, and V, or K, Q
 * and dY, as rows [T][hdp] (hdp = hd rounded up to 16, zero padded) for the weighted sums of
 * rows; the forward's Q rows are read in place. FLOPs: 2 T(T+1)/2 hd per product instead of
 * 2 T^2 hd; bytes: each head's q, k, v, dy are read about twice (pack + use).
 * Packing by sequence rather than by head, the softmax's exponentials kept in its L1 row and
 * the 8 x 8 transposes took the small model's attention from 7.98 to 7.41 ms a layer (one
 * core of the Zen 4 VM, 16 x 4 heads of T 128, hd 64, medians of 4 interleaved launches;
 * forward 3.01 -> 2.74, backward 4.96 -> 4.67) and the large one's (8 x 6 heads of T 256)
 * from 20.2 to 18.6 ms; the AVX2 kernels from 10.7 to 10.3 ms (small). Tried and not kept:
 * masked whole-vector softmax rows (4% off the AVX-512 forward, 10% onto the AVX2 one),
 * software prefetch of the next head's rows, non-temporal stores of dq, dk, dv (1%), and
 * rows read in place instead of packed (none on the small shape, 5% slower on the large). */

#define ATT_RB 4  /* rows per register block */
#define ATT_VL 16 /* the padding of packed operands, and the partial sums of a row, in floats */
#define ATT_INLINE static inline __attribute__((always_inline))

/* Unaligned vector load and store; macros, since a function returning a 64-byte vector
 * changes the ABI of the default (SSE2) clone. */
#define ATT_LD(v, p) memcpy(&(v), (p), sizeof(v))
#define ATT_ST(p, v) memcpy((p), &(v), sizeof(v))

static size_t round16(size_t n) {
  return (n + ATT_VL - 1) / ATT_VL * ATT_VL;
}

/* Row pointers of a row block; rows past T repeat the first (computed, never stored). */
static void att_rows(const float *a[ATT_RB], const float *base, size_t ld, int i0, int T) {
  for (int r = 0; r < ATT_RB; r++) a[r] = base + (size_t)(i0 + r < T ? i0 + r : i0) * ld;
}

typedef float att_v8 __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t att_i8 __attribute__((vector_size(8 * sizeof(int32_t))));

/* dst[c][j] = src[j][c] for an 8 x 8 block: three rounds of two-vector shuffles (pairs of
 * elements, pairs of pairs, halves), 24 shuffles for 64 values where a scalar transpose took
 * a load and a store each. */
static inline __attribute__((always_inline)) void att_transpose8(float *dst, size_t ldd, const float *src,
                                                                 size_t lds) {
  att_v8 r[8], t[8];
  for (int i = 0; i < 8; i++) memcpy(&r[i], src + (size_t)i * lds, sizeof(att_v8));
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shuffle(r[i], r[i + 1], (att_i8){0, 8, 1, 9, 4, 12, 5, 13});
    t[i + 1] = __builtin_shuffle(r[i], r[i + 1], (att_i8){2, 10, 3, 11, 6, 14, 7, 15});
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = __builtin_shuffle(t[i], t[i + 2], (att_i8){0, 1, 8, 9, 4, 5, 12, 13});
    r[i + 1] = __builtin_shuffle(t[i], t[i + 2], (att_i8){2, 3, 10, 11, 6, 7, 14, 15});
    r[i + 2] = __builtin_shuffle(t[i + 1], t[i + 3], (att_i8){0, 1, 8, 9, 4, 5, 12, 13});
    r[i + 3] = __builtin_shuffle(t[i + 1], t[i + 3], (att_i8){2, 3, 10, 11, 6, 7, 14, 15});
  }
  for (int i = 0; i < 4; i++) {
    t[i] = __builtin_shuffle(r[i], r[i + 4], (att_i8){0, 1, 2, 3, 8, 9, 10, 11});
    t[i + 4] = __builtin_shuffle(r[i], r[i + 4], (att_i8){4, 5, 6, 7, 12, 13, 14, 15});
  }
  for (int i = 0; i < 8; i++) memcpy(dst + (size_t)i * ldd, &t[i], sizeof(att_v8));
}

/* t[c][j] = src[j][c] for n rows of width w (stride ld) into t [w][ldt]; padding stays as
 * allocated (zero). By 8 x 8 blocks (att_transpose8), then the tails one value at a time:
 * the scalar transpose this replaces made the small model's attention 2.3% longer (16 x 4
 * heads of T 128, hd 64, medians of 5 interleaved launches: 7.28 against 7.11 ms a layer). */
SIMD_CLONES static void att_transpose(const float *src, size_t ld, int n, int w, float *t, int ldt) {
  int n8 = n / 8 * 8, w8 = w / 8 * 8;
  for (int j0 = 0; j0 < n8; j0 += 8)
    for (int c0 = 0; c0 < w8; c0 += 8) att_transpose8(t + (size_t)c0 * ldt + j0, ldt, src + (size_t)j0 * ld + c0, ld);
  for (int j = 0; j < n8; j++)
    for (int c = w8; c < w; c++) t[(size_t)c * ldt + j] = src[(size_t)j * ld + c];
  for (int j = n8; j < n; j++)
    for (int c = 0; c < w; c++) t[(size_t)c * ldt + j] = src[(size_t)j * ld + c];
}

/* e^x for x <= 0 (softmax arguments after the max is subtracted), to about 2 ulp: 2^k e^r
 * with k = round(x / ln 2), |r| <= ln2 / 2, e^r by its degree-7 Taylor polynomial; below
 * -87 it returns 0 up to float precision (2^-126 ~ 1e-38). Branch-free, so loops vectorise
 * (glibc's expf is a call: it was a quarter of the attention forward). */
ATT_INLINE float att_exp(float x) {
  x = x < -87.0f ? -87.0f : x;
  float t = x * 1.4426950409f;
  float k = (t + 12582912.0f) - 12582912.0f; /* round to nearest: adding 1.5 * 2^23 */
  float r = x - k * 0.693145751953125f - k * 1.428606765330187e-06f; /* ln2 in two parts */
  return exp_reduced(k, r);
}

/* One row's causal softmax: p[0..i] = softmax(scale * s[0..i]). Max and sum keep 16
 * partial results, so they vectorise without reassociating a single chain; the
 * exponentials go to s (in L1), so p is written once. */
ATT_INLINE void att_softmax_row(float *p, float *s, int i, float scale) {
  int n = i + 1, nb = n / ATT_VL * ATT_VL;
  float part[ATT_VL], mx = -INFINITY, sum = 0.0f;
  for (int l = 0; l < ATT_VL; l++) part[l] = -INFINITY;
  for (int j = 0; j < nb; j += ATT_VL)
    for (int l = 0; l < ATT_VL; l++) part[l] = s[j + l] > part[l] ? s[j + l] : part[l];
  for (int l = 0; l < ATT_VL; l++) mx = part[l] > mx ? part[l] : mx;
  for (int j = nb; j < n; j++) mx = s[j] > mx ? s[j] : mx;
  for (int j = 0; j < n; j++) s[j] = att_exp(scale * (s[j] - mx));
  for (int l = 0; l < ATT_VL; l++) part[l] = 0.0f;
  for (int j = 0; j < nb; j += ATT_VL)
    for (int l = 0; l < ATT_VL; l++) part[l] += s[j + l];
  for (int l = 0; l < ATT_VL; l++) sum += part[l];
  for (int j = nb; j < n; j++) sum += s[j];
  float inv = 1.0f / sum;
  for (int j = 0; j < n; j++) p[j] = s[j] * inv;
}

/* sum_j a[j] b[j] in 16 partial sums (vectorises, unlike one chain of dependent adds). */
ATT_INLINE float att_dot_row(const float *a, const float *b, int n) {
  float part[ATT_VL] = {0}, sum = 0.0f;
  int nb = n / ATT_VL * ATT_VL;
  for (int j = 0; j < nb; j += ATT_VL)
    for (int l = 0; l < ATT_VL; l++) part[l] += a[j + l] * b[j + l];
  for (int j = nb; j < n; j++) sum += a[j] * b[j];
  for (int l = 0; l < ATT_VL; l++) sum += part[l];
  return sum;
}

typedef struct att_work {
  int Tp, hdp;
  /* Per sequence, every head's operands, packed in one pass over its rows: t [H*hd][Tp]
   * (head h's transposed rows at h*hd), rows1 [H][T][hdp] (and rows2, rows3 for the
   * backward; NULL for the forward); s the scores of a row block (forward) or the dS of one
   * head [T rounded to 4][Tp] (backward). */
  float *t, *rows1, *rows2, *rows3, *s;
  void *mem;
} att_work;

/* The workspace of one attention call, zeroed (the padding is read as zero); backward: 1
 * for gpt_cpu_attention_bwd's, 0 for the forward's. Returns 0, or -1 when out of memory. */
static int att_work_alloc(att_work *w, int T, int H, int hd, int backward) {
  w->Tp = (int)round16((size_t)T);
  w->hdp = (int)round16((size_t)hd);
  size_t nt = (size_t)H * hd * w->Tp, nr = (size_t)H * T * w->hdp, nsets = backward ? 3 : 1;
  size_t ns = (size_t)(backward ? (T + ATT_RB - 1) / ATT_RB * ATT_RB : ATT_RB) * w->Tp;
  w->mem = calloc(nt + nsets * nr + ns + ATT_VL, sizeof(float));
  if (!w->mem) return -1;
  w->t = w->mem;
  w->rows1 = w->t + nt;
  w->rows2 = backward ? w->rows1 + nr : NULL;
  w->rows3 = backward ? w->rows2 + nr : NULL;
  w->s = w->rows1 + nsets * nr;
  return 0;
}

/* Packs one operand (q, k, v or dy: T rows of H*hd floats, stride ld) of every head of a
 * sequence: transposed into t, or as rows into rows [H][T][hdp]. Reading a sequence's rows
 * once in order, rather than each head's 256-byte pieces 3 KiB apart head by head, made the
 * small model's attention 3% shorter (medians of 8 interleaved launches, with the softmax
 * change alone on both sides: 7.56 -> 7.32 ms a layer). */
static void att_pack_heads(const float *src, size_t ld, int T, int H, int hd, const att_work *w, float *t,
                           float *rows) {
  if (t) att_transpose(src, ld, T, H * hd, t, w->Tp);
  for (int j = 0; rows && j < T; j++)
    for (int h = 0; h < H; h++)
      memcpy(rows + ((size_t)h * T + j) * w->hdp, src + (size_t)j * ld + (size_t)h * hd, (size_t)hd * sizeof(float));
}

/* The kernels and per-head passes, once per vector width (att_kernels.inc says why). */
#define ATT_W 16
#define ATT_NVMAX 4
#define ATT_SFX _w16
#define ATT_TARGET __attribute__((target("avx512f")))
#include "trainers/att_kernels.inc"

#define ATT_W 8
#define ATT_NVMAX 2
#define ATT_SFX _w8
#define ATT_TARGET __attribute__((target_clones("avx2", "default")))
#include "trainers/att_kernels.inc"

typedef void att_fwd_fn(const float *q, size_t ld, const float *kt, const float *vrows, float *p, float *y,
                        size_t ldy, int T, int hd, float scale, att_work *w);
typedef void att_bwd_fn(const float *vt, const float *krows, const float *qrows, const float *dyrows, float *dq,
                        size_t ld, const float *p, int T, int hd, float scale, att_work *w);

int gpt_cpu_attention_fwd(const float *qkv, float *probs, float *atty, int B, int T, int H, int hd, float scale) {
  att_work w;
  if (att_work_alloc(&w, T, H, hd, 0)) return -1;
  size_t d = (size_t)H * hd, ld = 3 * d, nrows = (size_t)T * w.hdp;
  att_fwd_fn *att_head_fwd = __builtin_cpu_supports("avx512f") ? att_head_fwd_w16 : att_head_fwd_w8;
  for (int b = 0; b < B; b++) {
    const float *q = qkv + (size_t)b * T * ld;
    att_pack_heads(q + d, ld, T, H, hd, &w, w.t, NULL);
    att_pack_heads(q + 2 * d, ld, T, H, hd, &w, NULL, w.rows1);
    for (int h = 0; h < H; h++)
      att_head_fwd(q + (size_t)h * hd, ld, w.t + (size_t)h * hd * w.Tp, w.rows1 + h * nrows,
                   probs + ((size_t)b * H + h) * T * T, atty + (size_t)b * T * d + (size_t)h * hd, d, T, hd, scale,
                   &w);
  }
  free(w.mem);
  return 0;
}

int gpt_cpu_attention_bwd(const float *qkv, const float *probs, const float *datty, float *dqkv, int B, int T,
                          int H, int hd, float scale) {
  att_work w;
  if (att_work_alloc(&w, T, H, hd, 1)) return -1;
  size_t d = (size_t)H * hd, ld = 3 * d, nrows = (size_t)T * w.hdp;
  att_bwd_fn *att_head_bwd = __builtin_cpu_supports("avx512f") ? att_head_bwd_w16 : att_head_bwd_w8;
  for (int b = 0; b < B; b++) {
    const float *q = qkv + (size_t)b * T * ld, *dy = datty + (size_t)b * T * d;
    att_pack_heads(q + 2 * d, ld, T, H, hd, &w, w.t, NULL);
    att_pack_heads(q + d, ld, T, H, hd, &w, NULL, w.rows1);
    att_pack_heads(q, ld, T, H, hd, &w, NULL, w.rows2);
    att_pack_heads(dy, d, T, H, hd, &w, NULL, w.rows3);
    for (int h = 0; h < H; h++)
      att_head_bwd(w.t + (size_t)h * hd * w.Tp, w.rows1 + h * nrows, w.rows2 + h * nrows, w.rows3 + h * nrows,
                   dqkv + (size_t)b * T * ld + (size_t)h * hd, ld, probs + ((size_t)b * H + h) * T * T, T, hd,
                   scale, &w);
  }
  free(w.mem);
  return 0;
}

int gpt_backend_is_cpu(const gpt_backend *be) {
  return be == &cpu_backend;
}

static const gpt_backend cpu_backend = {
    .name = "cpu-openblas",
    .gemm = cpu_gemm,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .add = cpu_add,
    .residual_bias = cpu_residual_bias,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .softmax_causal_fwd = cpu_softmax_causal_fwd,
    .softmax_causal_bwd = cpu_softmax_causal_bwd,
    .cross_entropy = cpu_cross_entropy,
};

const gpt_backend *gpt_backend_cpu(void) {
  static bool threads_set;
  if (!threads_set) {
    openblas_set_num_threads(1);
    threads_set = true;
  }
  return &cpu_backend;
}

/* trainers/backend_cpu.c: the CPU backend of the reference GPT (see backend.h).
 *
 * Matrix products go to OpenBLAS's cblas_sgemm, where nearly all of the FLOPs are; the
 * element-wise kernels are plain loops the compiler vectorises. OpenBLAS runs on ONE thread:
 * its threaded sgemm splits work differently with the thread count and machine load, which
 * changes the order of additions and so the bits of the result; one thread makes a run
 * bit-reproducible (same seed, same binary => same losses), and the data-parallel trainers
 * get their parallelism from ranks, one core each. openblas_set_num_threads(1) is called
 * on first use; OPENBLAS_NUM_THREADS in the environment is overridden.
 */
#include "trainers/backend.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static void cpu_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void cpu_bias_add(float *y, const float *bias, int rows, int n) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < n; j++)
      y[(size_t)r * n + j] += bias[j];
}

static void cpu_bias_grad(float *dbias, const float *dy, int rows, int n) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < n; j++)
      dbias[j] += dy[(size_t)r * n + j];
}

static void cpu_add(float *y, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    y[i] += x[i];
}

static void cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *x, const float *w,
                              const float *b, int rows, int d) {
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * d;
    float *o = out + (size_t)r * d;
    float mu = 0.0f, var = 0.0f;
    for (int j = 0; j < d; j++)
      mu += xr[j];
    mu /= (float)d;
    for (int j = 0; j < d; j++)
      var += (xr[j] - mu) * (xr[j] - mu);
    float rs = 1.0f / sqrtf(var / (float)d + 1e-5f);
    for (int j = 0; j < d; j++)
      o[j] = (xr[j] - mu) * rs * w[j] + b[j];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

/* With xhat = (x - mean) * rstd and g = dout * w:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
static void cpu_layernorm_bwd(float *dx, float *dw, float *db, const float *dout, const float *x,
                              const float *w, const float *mean, const float *rstd, int rows, int d) {
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * d, *dr = dout + (size_t)r * d;
    float *dxr = dx + (size_t)r * d;
    float mu = mean[r], rs = rstd[r], gsum = 0.0f, gxsum = 0.0f;
    for (int j = 0; j < d; j++) {
      float xhat = (xr[j] - mu) * rs, g = dr[j] * w[j];
      gsum += g;
      gxsum += g * xhat;
      dw[j] += dr[j] * xhat;
      db[j] += dr[j];
    }
    gsum /= (float)d;
    gxsum /= (float)d;
    for (int j = 0; j < d; j++) {
      float xhat = (xr[j] - mu) * rs;
      dxr[j] += rs * (dr[j] * w[j] - gsum - xhat * gxsum);
    }
  }
}

#define GELU_C 0.7978845608028654f /* sqrt(2 / pi) */

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
  float p = 1.0f / 720 + r * (1.0f / 5040);
  p = 1.0f / 24 + r * (1.0f / 120 + r * p);
  p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * p)));
  int32_t bits = ((int32_t)k + 127) << 23;
  float two_k;
  memcpy(&two_k, &bits, sizeof(two_k));
  return 1.0f - 2.0f / (p * two_k + 1.0f);
}

/* GELU is the largest element-wise cost (4*d values per token per layer, twice), so it is
 * compiled for AVX-512 and AVX2 too and the loader picks the best the CPU has (GCC's
 * target_clones). Results may then differ in the last bits between CPUs (FMA contraction),
 * never between runs on one machine. */
#define SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

SIMD_CLONES static void cpu_gelu_fwd(float *out, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    out[i] = 0.5f * v * (1.0f + gelu_tanh(GELU_C * (v + 0.044715f * v * v * v)));
  }
}

SIMD_CLONES static void cpu_gelu_bwd(float *dx, const float *x, const float *dout, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i], th = gelu_tanh(GELU_C * (v + 0.044715f * v * v * v));
    float du = GELU_C * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du);
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

static const gpt_backend cpu_backend = {
    .name = "cpu-openblas",
    .gemm = cpu_gemm,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .add = cpu_add,
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

/* trainers/backend.h: the compute interface of the reference GPT.
 *
 * Every floating-point operation of the model's forward and backward goes through one of
 * these function pointers, so a second backend (cuBLAS + CUDA kernels) can be added later
 * without touching gpt.c. The CPU backend (backend_cpu.c) runs the matrix products through
 * OpenBLAS's cblas_sgemm and the element-wise kernels as plain C loops.
 *
 * Conventions: fp32, row-major, leading dimensions in elements. "rows x d" tensors are the
 * B*T token rows of a batch. Kernels named *_bwd ACCUMULATE into parameter gradients
 * (dw, db) and WRITE the input gradient unless said otherwise, so one gradient buffer can
 * collect a whole step.
 */
#ifndef WEFT_TRAINERS_BACKEND_H
#define WEFT_TRAINERS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gpt_backend {
  const char *name;

  /* C[m x n] = alpha * op(A) * op(B) + beta * C, op(X) = X^T when the flag is set.
     * op(A) is m x k, op(B) is k x n. */
  void (*gemm)(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
               const float *b, int ldb, float beta, float *c, int ldc);

  /* y[r, :] += bias for each of rows rows of width n. */
  void (*bias_add)(float *y, const float *bias, int rows, int n);
  /* dbias += sum over rows of dy[r, :]. */
  void (*bias_grad)(float *dbias, const float *dy, int rows, int n);
  /* y[i] += x[i]. */
  void (*add)(float *y, const float *x, size_t n);
  /* y[r, :] = x[r, :] + bias for each of rows rows of width n (writes; y may alias x): a
     * residual and a bias in one pass, where a linear layer then adds its product (gemm with
     * beta 1). */
  void (*residual_bias)(float *y, const float *x, const float *bias, int rows, int n);

  /* LayerNorm over the last dimension (eps 1e-5): out = (x - mean) * rstd * w + b.
     * Saves mean and rstd per row for the backward. */
  void (*layernorm_fwd)(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b,
                        int rows, int d);
  /* dx += d(loss)/dx (accumulates: the residual stream already holds a gradient);
     * dw, db accumulate. */
  void (*layernorm_bwd)(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                        const float *mean, const float *rstd, int rows, int d);

  /* GELU, tanh approximation (GPT-2): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
     * for n values, and, when dgelu is non-NULL, dgelu = gelu'(x) (writes; dgelu may alias x,
     * out may not alias either). The derivative is kept from the forward because the tanh
     * is where GELU's time goes: recomputing it made the backward compute-bound (2048 x 1024
     * values, one core of the AMD EPYC Zen 4 VM: 1.45 ms, and 0.32-0.36 more for the bias
     * gradient, against 0.56-0.63 for the pass that only multiplies and sums it; the forward
     * takes 0.5 ms longer for writing it). */
  void (*gelu_fwd)(float *out, float *dgelu, const float *x, size_t n);
  /* dx = dgelu * dout over rows x width values (writes; dx may alias dout), dgelu from
     * gelu_fwd; when dbias is non-NULL, dbias[j] += sum over rows of dx[r, j] (the bias
     * gradient of the linear layer before the GELU, summed while dx is in registers; the
     * same order of additions as bias_grad). */
  void (*gelu_bwd)(float *dx, float *dbias, const float *dgelu, const float *dout, int rows, int width);

  /* Causal softmax of one T x T score matrix: p[i, j] = softmax_j(scale * s[i, j]) for
     * j <= i, 0 for j > i. Max-subtracted. s and p may alias. */
  void (*softmax_causal_fwd)(float *p, const float *s, int t, float scale);
  /* ds = scale * p * (dp - sum_j p dp) on the causal triangle, 0 above it (writes).
     * dp and ds may alias. */
  void (*softmax_causal_bwd)(float *ds, const float *p, const float *dp, int t, float scale);

  /* Mean cross-entropy of rows rows of logits (width v) against targets; writes
     * dlogits = (softmax - onehot) / rows in place of the logits when dlogits is non-NULL
     * (dlogits may alias logits). Returns the mean loss, summed in double. */
  double (*cross_entropy)(float *dlogits, const float *logits, const int *targets, int rows, int v);
} gpt_backend;

/* The OpenBLAS backend. Sets OpenBLAS to one thread (see backend_cpu.c). */
const gpt_backend *gpt_backend_cpu(void);

#endif

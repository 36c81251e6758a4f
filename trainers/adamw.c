/* trainers/adamw.c: AdamW with decoupled weight decay and global-norm clipping; see adamw.h. */
#include "trainers/adamw.h"

#include <math.h>

#include "trainers/simd_clones.h"

gpt_adamw gpt_adamw_defaults(void) {
  return (gpt_adamw){.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
}

/* The optimizer step streams p, g, m and v once (7 x 4 bytes per parameter): it is bound by
 * memory bandwidth, so both loops are written to vectorize (no errno from sqrt, no aliasing,
 * independent partial sums) and compiled for AVX-512 and AVX2 too (SIMD_CLONES), as
 * backend_cpu.c's kernels are. A sum's bits depend on the lane count, which is fixed on one
 * machine. */

enum { SUMSQ_LANES = 16 };

SIMD_CLONES double gpt_grad_sumsq(const float *restrict g, size_t n) {
  double part[SUMSQ_LANES] = {0};
  size_t i = 0;
  for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)
    for (int l = 0; l < SUMSQ_LANES; l++)
      part[l] += (double)g[i + l] * g[i + l];
  double s = 0.0;
  for (; i < n; i++)
    s += (double)g[i] * g[i];
  for (int l = 0; l < SUMSQ_LANES; l++)
    s += part[l];
  return s;
}

float gpt_clip_factor(double sumsq, float max_norm) {
  double norm = sqrt(sumsq);
  if (max_norm <= 0.0f || norm <= max_norm) return 1.0f;
  return (float)(max_norm / (norm + 1e-6));
}

SIMD_CLONES static void update_span(const gpt_adamw *o, float bc1, float bc2, float wd, float *restrict p,
                                    const float *restrict g, float *restrict m, float *restrict v, size_t n,
                                    float grad_scale) {
  const float b1 = o->beta1, b2 = o->beta2, lr = o->lr, eps = o->eps, decay = 1.0f - lr * wd;
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * grad_scale;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    p[i] = p[i] * decay - lr * mhat / (sqrtf(vhat) + eps);
  }
}

void gpt_adamw_update(const gpt_adamw *o, long step, const gpt_layout *lay, size_t lo, size_t hi, float *p,
                      const float *g, float *m, float *v, float grad_scale) {
  float bc1 = (float)(1.0 - pow(o->beta1, (double)step));
  float bc2 = (float)(1.0 - pow(o->beta2, (double)step));
  for (int i = 0; i < lay->ntensors; i++) {
    const gpt_tensor *t = &lay->tensors[i];
    size_t a = t->offset > lo ? t->offset : lo, b = t->offset + t->size;
    if (b > hi) b = hi;
    if (a >= b) continue;
    size_t k = a - lo;
    update_span(o, bc1, bc2, t->decay ? o->weight_decay : 0.0f, p + k, g + k, m + k, v + k, b - a,
                grad_scale);
  }
}

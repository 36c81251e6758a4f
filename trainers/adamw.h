/* trainers/adamw.h: AdamW and global-norm gradient clipping over the flat parameter buffer.
 *
 * AdamW (Loshchilov and Hutter, "Decoupled Weight Decay Regularization"), as PyTorch's
 * torch.optim.AdamW computes it: p *= 1 - lr*wd (matrices only), m = b1 m + (1-b1) g,
 * v = b2 v + (1-b2) g^2, p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
 * Updates work on any range [lo, hi) of the flat buffer, so a ZeRO/FSDP rank can update
 * just its shard; the layout says which floats get weight decay.
 */
#ifndef WEFT_TRAINERS_ADAMW_H
#define WEFT_TRAINERS_ADAMW_H

#include <stddef.h>

#include "trainers/gpt.h"

typedef struct gpt_adamw {
  float lr, beta1, beta2, eps, weight_decay;
} gpt_adamw;

/* lr 3e-4, betas 0.9 / 0.95, eps 1e-8, weight decay 0.1 (nanoGPT's choice for small GPTs). */
gpt_adamw gpt_adamw_defaults(void);

/* Sum of squares of n gradient values, in double (add the shards' sums, then sqrt). */
double gpt_grad_sumsq(const float *g, size_t n);
/* Factor to multiply gradients by so their global norm is at most max_norm (1 if it is
 * already, or if max_norm <= 0). */
float gpt_clip_factor(double sumsq, float max_norm);

/* One AdamW step (step counts from 1) on the flat range [lo, hi) of lay. p, g, m, v point to
 * the values of element lo; g is multiplied by grad_scale first (the clip factor). */
void gpt_adamw_update(const gpt_adamw *o, long step, const gpt_layout *lay, size_t lo, size_t hi, float *p,
                      const float *g, float *m, float *v, float grad_scale);

#endif

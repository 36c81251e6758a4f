/* trainers/moe_model.h: the reference GPT with every block's MLP replaced by a MoE layer
 * whose experts are sharded across ranks (weft issue 6, weft-train-moe).
 *
 * Block l:  xmid = x + attn(LN1(x))           (gpt_attn_forward, gpt.h)
 *           y    = xmid + MoE_l(LN2(xmid))     (moe_layer.h: router + top-k experts)
 * Embeddings, attention, LayerNorms, the routers and the tied head are REPLICATED on every
 * rank (their gradients are averaged with WEFT_AVG by the trainer); each rank holds only its
 * E/N experts of every layer. One flat parameter buffer (and a gradient buffer alike):
 *     [0, rep_total)        replicated: unit 0 wte, wpe; unit 1+l: ln1 w/b, qkv w/b,
 *                           proj w/b (at gpt.h's block_off offsets), ln2 w/b, router w [d, E];
 *                           unit L+1: final LayerNorm w/b
 *     [rep_total, total)    this rank's experts, layer-major: [l][local j] fc w [d, h], fc b,
 *                           fcproj w [h, d], fcproj b
 * The objective is mean cross-entropy + sum over layers of the aux loss. Each rank's
 * gradients are those of ITS tokens' objective; the global objective is the mean over
 * ranks, so replicated gradients are averaged across ranks, and expert gradients, which
 * already SUM the contributions of every rank's tokens, are divided by N in
 * moe_model_backward. One process with --groups N on the N ranks' tokens then computes
 * the same gradients.
 */
#ifndef WEFT_TRAINERS_MOE_MODEL_H
#define WEFT_TRAINERS_MOE_MODEL_H

#include <stdint.h>

#include "trainers/gpt.h"
#include "trainers/moe_layer.h"

typedef struct moe_model {
  gpt_model *g; /* attention, embeddings, head, activations; its own params only seed the init */
  moe_config mc;
  int layers, groups;
  moe_exchange ex;
  gpt_layout lay;      /* all tensors of the flat buffer; unit L+2 = the local experts */
  size_t rep_total;    /* replicated floats, at the start of the buffer */
  size_t attn_size;    /* floats of a block's six attention tensors */
  size_t blk_ln2, blk_router, blk_size; /* offsets inside a replicated block unit, its size */
  size_t expert_size;  /* floats per expert */
  float *params, *grads;
  moe_layer *moe; /* L */
  moe_scratch scr;
  float *dln2;    /* [rows, d] */
  double ce, aux; /* of the last forward */
} moe_model;

/* Builds the model for up to max_batch sequences per process, split into groups capacity
 * groups. ex says the rank, the ranks (E must be a multiple) and the communicator. Returns
 * NULL with the reason in err. */
moe_model *moe_model_create(const gpt_config *cfg, const moe_config *mc, int max_batch, int groups,
                            moe_exchange ex, char *err, size_t errlen);
void moe_model_free(moe_model *m);

/* Deterministic from seed and independent of the rank count: replicated tensors as
 * gpt_init_params, routers N(0, 0.02), expert e of layer l from its own stream. */
void moe_model_init_params(moe_model *m, uint64_t seed);

static inline float *moe_block_ptr(const moe_model *m, float *flat, int l) {
  return flat + m->lay.unit_offset[1 + l];
}
static inline float *moe_experts_ptr(const moe_model *m, float *flat, int l) {
  return flat + m->rep_total + (size_t)l * m->moe[0].nlocal * m->expert_size;
}

/* Forward of B sequences of T tokens (the trainer's rows of the global batch); sets m->ce
 * and m->aux. Collective: every rank calls it with the same B and T. */
weft_status_t moe_model_forward(moe_model *m, const int *tokens, const int *targets, int B, int T);
/* Accumulates the gradients of the last forward's ce + aux into m->grads; collective. */
weft_status_t moe_model_backward(moe_model *m);

/* Writes every parameter, all E experts of every layer in expert order (the layout a
 * 1-process run has), into out on rank 0 (rep_total + L * E * expert_size floats; out
 * may be NULL elsewhere). Collective. */
weft_status_t moe_model_gather(moe_model *m, float *out);
size_t moe_model_full_size(const moe_model *m);

/* Active parameters per token (k experts of each layer), counted as
 * gpt_num_params_nonembedding counts a dense model's, and the training FLOPs per token
 * 6 N_active + 12 L H Q T (see moe.c). */
size_t moe_num_params_active(const gpt_config *cfg, const moe_config *mc);
double moe_flops_per_token(const gpt_config *cfg, const moe_config *mc);

#endif

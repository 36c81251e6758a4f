/* trainers/gpt.h: the small GPT-style decoder shared by every weft trainer.
 *
 * Model: token + position embeddings; L pre-LayerNorm blocks
 *     x = x + proj(attention(LN1(x)))      causal multi-head, softmax(q k^T / sqrt(hd))
 *     x = x + fc2(gelu(fc1(LN2(x))))       4*d hidden, GELU tanh approximation (GPT-2)
 * final LayerNorm; LM head tied to the token embedding: logits = h * Wte^T.
 * fp32 throughout. Weights are stored [in, out] so a linear layer is y = x W + b.
 *
 * Parameters live in ONE contiguous float buffer (and gradients in a second with the same
 * layout), split into units a distributed trainer can shard, gather or bucket by:
 *     unit 0        embeddings: wte [V, d], wpe [T, d]
 *     unit 1 .. L   block l-1: ln1 w/b, qkv w [d, 3d]/b, proj w [d, d]/b, ln2 w/b,
 *                   fc w [d, 4d]/b, fcproj w [4d, d]/b  (same relative layout in every block)
 *     unit L + 1    final LayerNorm w/b
 * Units are in forward order, so gradients become final in reverse unit order during the
 * backward (DDP buckets walk units from last to first). The per-unit functions take the
 * unit's parameter base pointer, so FSDP can pass a freshly gathered copy and a pipeline
 * stage can own only a range of blocks.
 */
#ifndef WEFT_TRAINERS_GPT_H
#define WEFT_TRAINERS_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "trainers/backend.h"

typedef struct gpt_config {
  int vocab;  /* V: tokenizer size */
  int seq;    /* T: context length (positions) */
  int layers; /* L */
  int dmodel; /* d, a multiple of heads */
  int heads;  /* H; head dimension Q = d / H */
} gpt_config;

/* Tensors of one block, in their order inside the block's range. */
enum gpt_block_tensor {
  GPT_LN1_W,
  GPT_LN1_B,
  GPT_QKV_W,
  GPT_QKV_B,
  GPT_PROJ_W,
  GPT_PROJ_B,
  GPT_LN2_W,
  GPT_LN2_B,
  GPT_FC_W,
  GPT_FC_B,
  GPT_FCPROJ_W,
  GPT_FCPROJ_B,
  GPT_BLOCK_NTENSORS
};

typedef struct gpt_tensor {
  char name[32]; /* e.g. "h2.fc_w" */
  size_t offset; /* in floats, into the flat buffer */
  size_t size;   /* in floats */
  int unit;      /* 0 embeddings, 1..L blocks, L+1 final LayerNorm */
  int decay;     /* 1 for matrices (AdamW weight decay), 0 for biases and LayerNorm */
} gpt_tensor;

typedef struct gpt_layout {
  size_t total;                         /* floats in the flat buffer */
  int nunits;                           /* L + 2 */
  size_t *unit_offset;                  /* nunits + 1 entries: unit u is [off[u], off[u+1]) */
  size_t block_off[GPT_BLOCK_NTENSORS]; /* tensor offsets relative to a block's base */
  size_t block_size;                    /* floats per block */
  int ntensors;
  gpt_tensor *tensors; /* in buffer order */
} gpt_layout;

/* Activations of one block saved by its forward for its backward (B*T rows). */
typedef struct gpt_block_acts {
  float *x; /* the block's input (residual stream), kept by the caller */
  float *ln1, *ln1_mean, *ln1_rstd;
  float *qkv;   /* [BT, 3d]: q | k | v, head h at columns h*Q of each */
  float *probs; /* [B, H, T, T] causal attention probabilities */
  float *atty;  /* [BT, d] attention output before proj */
  float *xmid;  /* [BT, d] residual after the attention half */
  float *ln2, *ln2_mean, *ln2_rstd;
  float *dgelu; /* [BT, 4d] GELU's derivative at the fc output (the pre-activation itself is
                 * not kept: the backward needs only this) */
  float *gelu;  /* [BT, 4d] */
} gpt_block_acts;

typedef struct gpt_model {
  gpt_config cfg;
  const gpt_backend *be;
  gpt_layout lay;
  float *params, *grads; /* flat buffers of lay.total floats */
  int max_batch;         /* B the activations were sized for */
  int B, T;              /* shape of the last forward */
  const int *tokens, *targets;
  float **res;          /* L + 1 residual streams [BT, d]: res[0] embeddings, res[l+1] block l out */
  gpt_block_acts *acts; /* L */
  float *lnf, *lnf_mean, *lnf_rstd, *logits; /* head; logits hold dlogits after a forward */
  const float *head_x;                       /* the head's input, saved for its backward */
  float *dres[2];                            /* residual gradients [BT, d] (dres[1] is free for callers) */
  float *scratch_d, *scratch_3d, *scratch_4d, *scratch_tt; /* backward temporaries */
  double loss;                                             /* of the last forward, before rounding to float */
} gpt_model;

/* Appends a tensor of size floats at *off to lay (lay->tensors must have room; the caller
 * sized it) and advances *off by size. unit and decay as in gpt_tensor; name is truncated
 * to 31 characters. For trainers that build their own layout (MoE) from gpt's pieces. */
void gpt_layout_add_tensor(gpt_layout *lay, const char *name, size_t *off, size_t size, int unit, int decay);

/* Allocates one block's saved activations for up to batch sequences of T positions (B*T
 * rows; probs is [batch, H, T, T]), zeroed. Returns 0, or -1 out of memory (what was
 * allocated stays in *a for gpt_block_acts_free). Not thread-safe on the same *a. Used by
 * gpt_model_create and by trainers that keep several activation sets (pipeline stages). */
int gpt_block_acts_alloc(gpt_block_acts *a, const gpt_config *cfg, int batch, int T);
/* Frees what gpt_block_acts_alloc allocated (NULL fields are fine); *a is not cleared. */
void gpt_block_acts_free(gpt_block_acts *a);

/* Checks a config; on error writes a message to err (may be NULL) and returns -1. */
int gpt_config_check(const gpt_config *cfg, char *err, size_t errlen);

/* Allocates a model (params, grads, activations for up to max_batch sequences of cfg.seq).
 * Parameters are zero until gpt_init_params. Returns NULL on a bad config or out of memory,
 * with the reason in err. */
gpt_model *gpt_model_create(const gpt_config *cfg, int max_batch, const gpt_backend *be, char *err,
                            size_t errlen);
void gpt_model_free(gpt_model *m);

/* GPT-2 initialisation from a seed (deterministic on every machine with IEEE floats):
 * matrices and embeddings N(0, 0.02), proj and fcproj N(0, 0.02 / sqrt(2L)), biases 0,
 * LayerNorm weights 1. */
void gpt_init_params(gpt_model *m, uint64_t seed);
void gpt_zero_grad(gpt_model *m);

/* Base pointer of unit u in a flat buffer (params or grads). */
static inline float *gpt_unit_ptr(const gpt_model *m, float *flat, int unit) {
  return flat + m->lay.unit_offset[unit];
}

/* --- per-unit API (p = unit parameter base, g = unit gradient base, accumulated) --- */

/* x0[b, t] = wte[tokens[b, t]] + wpe[t]. */
void gpt_embed_forward(gpt_model *m, const float *p, const int *tokens, float *x0, int B, int T);
void gpt_embed_backward(gpt_model *m, float *g, const int *tokens, const float *dx0, int B, int T);

/* Block l forward: y = block(x). x must stay unchanged until the block's backward. */
void gpt_block_forward(gpt_model *m, int l, const float *p, const float *x, float *y, int B, int T);
/* Block l backward: writes dx from dy (dx may alias dy), accumulates into g. */
void gpt_block_backward(gpt_model *m, int l, const float *p, float *g, const float *dy, float *dx, int B,
                        int T);

/* The attention half of block l alone (for trainers that replace the MLP, e.g. MoE):
 *     xmid = x + proj(attention(LN1(x)))  ->  m->acts[l].xmid [B*T, d]
 * p needs only the first six tensors of the block layout (LN1 w/b, QKV w/b, PROJ w/b), at
 * their block_off offsets. x must stay unchanged until gpt_attn_backward. */
void gpt_attn_forward(gpt_model *m, int l, const float *p, const float *x, int B, int T);
/* Its backward: dxmid = d(loss)/d(xmid) [B*T, d] (the residual's full gradient); writes
 * dx = d(loss)/dx (dx may alias dxmid; it must not be m->scratch_*, which this uses, except
 * dxmid may be m->scratch_d), accumulates the six tensors' gradients into g. */
void gpt_attn_backward(gpt_model *m, int l, const float *p, float *g, const float *dxmid, float *dx, int B,
                       int T);

/* Final LayerNorm, tied head and mean cross-entropy over B*T positions. p_final is unit
 * L+1, p_embed unit 0 (for wte). x must stay unchanged until gpt_head_backward. */
float gpt_head_forward(gpt_model *m, const float *p_final, const float *p_embed, const float *x,
                       const int *targets, int B, int T);
/* Writes dx; accumulates into g_final and into g_embed's wte part. */
void gpt_head_backward(gpt_model *m, const float *p_final, const float *p_embed, float *g_final,
                       float *g_embed, float *dx, int B, int T);

/* --- whole model on m->params / m->grads --- */

/* tokens, targets: [B, T] with T <= cfg.seq, B <= max_batch. Returns the mean loss. */
float gpt_forward(gpt_model *m, const int *tokens, const int *targets, int B, int T);
/* Mean loss without the logits gradient, same value. It overwrites the saved activations,
 * so it must not come between a gpt_forward and its gpt_backward. */
float gpt_eval_loss(gpt_model *m, const int *tokens, const int *targets, int B, int T);
/* Accumulates d(loss)/d(params) of the last gpt_forward into m->grads. */
void gpt_backward(gpt_model *m);

/* --- counts for MFU --- */

/* N of the PaLM formula: every parameter that enters a matrix product once per token, i.e.
 * all parameters except the position embedding (a lookup). The tied wte counts once: its
 * lookup is free, but the LM head multiplies by it. */
size_t gpt_num_params_nonembedding(const gpt_config *cfg);
/* Training FLOPs per token (forward + backward), PaLM (Chowdhery et al. 2022) appendix B:
 *     6 N + 12 L H Q T
 * 6N: each weight does 2 FLOPs (multiply + add) per token in the forward and 4 in the
 * backward (input and weight gradients). 12LHQT: per layer and token, q k^T and p v each
 * cost 2*T*H*Q in the forward (full T x T, the causal mask's saved half is NOT subtracted),
 * times 3 for forward + backward. Element-wise work (LayerNorm, GELU, softmax, AdamW) and
 * recomputation are not counted, as MFU defines. */
double gpt_flops_per_token(const gpt_config *cfg);

#endif

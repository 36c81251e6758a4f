/* trainers/moe_model.c: layout, initialisation, forward and backward of the MoE GPT; see
 * moe_model.h. The attention halves, embeddings and head are gpt.c's per-unit functions
 * called on this model's own flat buffer; the MLP halves are moe_layer.c.
 */
#include "trainers/moe_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainers/rng.h"

#define ROUTER_SEED_SALT 0x726f757465725f77ull
#define EXPERT_SEED_SALT 0x6578706572745f70ull

static const char *const expert_names[MOE_EXPERT_NTENSORS] = {"fc_w", "fc_b", "fcproj_w", "fcproj_b"};

/* Replicated units 0 .. L+1, reusing the GPT layout's tensors where they are the same. */
static void layout_replicated(moe_model *m, size_t *off) {
  const gpt_layout *gl = &m->g->lay;
  int L = m->layers;
  size_t d = (size_t)m->mc.dmodel;
  gpt_layout *lay = &m->lay;
  for (int i = 0; i < 2; i++) /* wte, wpe */
    gpt_layout_add_tensor(lay, gl->tensors[i].name, off, gl->tensors[i].size, 0, gl->tensors[i].decay);
  for (int l = 0; l < L; l++) {
    lay->unit_offset[1 + l] = *off;
    for (int i = 0; i <= GPT_PROJ_B; i++) {
      const gpt_tensor *t = &gl->tensors[2 + l * GPT_BLOCK_NTENSORS + i];
      gpt_layout_add_tensor(lay, t->name, off, t->size, 1 + l, t->decay);
    }
    char name[32];
    const char *base[3] = {"ln2_w", "ln2_b", "router_w"};
    size_t size[3] = {d, d, d * m->mc.experts};
    for (int i = 0; i < 3; i++) {
      snprintf(name, sizeof(name), "h%d.%s", l, base[i]);
      gpt_layout_add_tensor(lay, name, off, size[i], 1 + l, i == 2);
    }
  }
  lay->unit_offset[L + 1] = *off;
  gpt_layout_add_tensor(lay, "lnf_w", off, d, L + 1, 0);
  gpt_layout_add_tensor(lay, "lnf_b", off, d, L + 1, 0);
  lay->unit_offset[L + 2] = *off;
}

static int layout_init(moe_model *m) {
  int L = m->layers, El = m->mc.experts / m->ex.nranks;
  gpt_layout *lay = &m->lay;
  lay->nunits = L + 3;
  lay->unit_offset = calloc((size_t)lay->nunits + 1, sizeof(size_t));
  lay->tensors = calloc((size_t)(4 + 9 * L + MOE_EXPERT_NTENSORS * L * El), sizeof(gpt_tensor));
  if (!lay->unit_offset || !lay->tensors) return -1;
  size_t off = 0;
  layout_replicated(m, &off);
  m->rep_total = off;
  m->attn_size = m->g->lay.block_off[GPT_LN2_W];
  m->blk_ln2 = m->attn_size;
  m->blk_router = m->blk_ln2 + 2 * (size_t)m->mc.dmodel;
  m->blk_size = m->lay.unit_offset[2] - m->lay.unit_offset[1];
  m->expert_size = moe_expert_size(&m->mc);
  for (int l = 0; l < L; l++)
    for (int j = 0; j < El; j++)
      for (int i = 0; i < MOE_EXPERT_NTENSORS; i++) {
        char name[32];
        snprintf(name, sizeof(name), "h%d.e%d.%s", l, m->ex.rank * El + j, expert_names[i]);
        size_t sz = moe_expert_off(&m->mc, i + 1) - moe_expert_off(&m->mc, i);
        gpt_layout_add_tensor(lay, name, &off, sz, L + 2, i == MOE_FC_W || i == MOE_FCPROJ_W);
      }
  lay->unit_offset[L + 3] = off;
  lay->total = off;
  return 0;
}

static int check_config(const gpt_config *cfg, const moe_config *mc, int max_batch, int groups, int nranks,
                        char *err, size_t errlen) {
  const char *why = NULL;
  if (mc->topk != 1 && mc->topk != 2)
    why = "--topk must be 1 or 2";
  else if (mc->experts < mc->topk || nranks < 1 || mc->experts % nranks)
    why = "--experts must be a multiple of the number of ranks, and at least --topk";
  else if (groups < 1 || max_batch % groups)
    why = "--batch must be a multiple of --groups";
  else if (mc->hidden < 1 || mc->dmodel != cfg->dmodel || !(mc->capacity_factor > 0.0f))
    why = "--expert-hidden and --capacity-factor must be positive";
  if (!why) return 0;
  snprintf(err, errlen, "bad MoE config (experts %d topk %d ranks %d batch %d groups %d): %s", mc->experts,
           mc->topk, nranks, max_batch, groups, why);
  return -1;
}

moe_model *moe_model_create(const gpt_config *cfg, const moe_config *mc, int max_batch, int groups,
                            moe_exchange ex, char *err, size_t errlen) {
  if (check_config(cfg, mc, max_batch, groups, ex.nranks, err, errlen)) return NULL;
  moe_model *m = calloc(1, sizeof(*m));
  if (!m) goto oom;
  m->mc = *mc;
  m->layers = cfg->layers;
  m->groups = groups;
  m->ex = ex;
  m->g = gpt_model_create(cfg, max_batch, gpt_backend_cpu(), err, errlen);
  if (!m->g) goto fail;
  int rows = max_batch * cfg->seq;
  m->moe = calloc((size_t)cfg->layers, sizeof(moe_layer));
  if (!m->moe || layout_init(m)) goto oom;
  for (int l = 0; l < cfg->layers; l++)
    if (moe_layer_init(&m->moe[l], mc, groups, ex.rank, ex.nranks, rows, err, errlen)) goto fail;
  if (moe_scratch_init(&m->scr, &m->moe[0], err, errlen)) goto fail;
  m->params = calloc(m->lay.total, sizeof(float));
  m->grads = calloc(m->lay.total, sizeof(float));
  m->dln2 = calloc((size_t)rows * cfg->dmodel, sizeof(float));
  if (!m->params || !m->grads || !m->dln2) goto oom;
  return m;
oom:
  snprintf(err, errlen, "out of memory allocating the MoE model (batch %d, seq %d, dmodel %d, experts %d)",
           max_batch, cfg->seq, cfg->dmodel, mc->experts);
fail:
  moe_model_free(m);
  return NULL;
}

void moe_model_free(moe_model *m) {
  if (!m) return;
  for (int l = 0; m->moe && l < m->layers; l++)
    if (m->moe[l].probs) moe_layer_free(&m->moe[l]);
  moe_scratch_free(&m->scr);
  gpt_model_free(m->g);
  free(m->moe);
  free(m->lay.unit_offset);
  free(m->lay.tensors);
  free(m->params);
  free(m->grads);
  free(m->dln2);
  free(m);
}

static void init_expert(moe_model *m, float *p, uint64_t seed, int l, int e) {
  gpt_rng rng;
  gpt_rng_seed(&rng, seed ^ EXPERT_SEED_SALT ^ ((uint64_t)l << 32) ^ (uint64_t)e);
  const moe_config *c = &m->mc;
  double resid_std = 0.02 / sqrt(2.0 * m->layers);
  size_t n1 = (size_t)c->dmodel * c->hidden;
  float *w1 = p + moe_expert_off(c, MOE_FC_W), *w2 = p + moe_expert_off(c, MOE_FCPROJ_W);
  memset(p, 0, m->expert_size * sizeof(float));
  for (size_t i = 0; i < n1; i++)
    w1[i] = (float)(0.02 * gpt_rng_normal(&rng));
  for (size_t i = 0; i < n1; i++)
    w2[i] = (float)(resid_std * gpt_rng_normal(&rng));
}

void moe_model_init_params(moe_model *m, uint64_t seed) {
  gpt_model *g = m->g;
  int L = m->layers, E = m->mc.experts, El = m->moe[0].nlocal, d = m->mc.dmodel;
  gpt_init_params(g, seed);
  memcpy(m->params, g->params, g->lay.unit_offset[1] * sizeof(float)); /* wte, wpe */
  gpt_rng rng;
  gpt_rng_seed(&rng, seed ^ ROUTER_SEED_SALT);
  for (int l = 0; l < L; l++) {
    float *p = moe_block_ptr(m, m->params, l), *gp = gpt_unit_ptr(g, g->params, 1 + l);
    memcpy(p, gp, m->attn_size * sizeof(float));
    memcpy(p + m->blk_ln2, gp + g->lay.block_off[GPT_LN2_W], 2 * (size_t)d * sizeof(float));
    for (size_t i = 0; i < (size_t)d * E; i++)
      p[m->blk_router + i] = (float)(0.02 * gpt_rng_normal(&rng));
    for (int j = 0; j < El; j++)
      init_expert(m, moe_experts_ptr(m, m->params, l) + j * m->expert_size, seed, l, m->ex.rank * El + j);
  }
  memcpy(m->params + m->lay.unit_offset[L + 1], gpt_unit_ptr(g, g->params, L + 1), 2 * (size_t)d * sizeof(float));
}

/* ------------------------------------------------------------------ forward / backward */

static weft_status_t block_forward(moe_model *m, int l, const float *x, float *y, int B, int T) {
  gpt_model *g = m->g;
  const gpt_backend *be = g->be;
  gpt_block_acts *a = &g->acts[l];
  const float *p = moe_block_ptr(m, m->params, l);
  int d = m->mc.dmodel, rows = B * T;
  gpt_attn_forward(g, l, p, x, B, T);
  be->layernorm_fwd(a->ln2, a->ln2_mean, a->ln2_rstd, a->xmid, p + m->blk_ln2, p + m->blk_ln2 + d, rows, d);
  weft_status_t st = moe_layer_forward(&m->moe[l], &m->scr, &m->ex, be, p + m->blk_router,
                                       moe_experts_ptr(m, m->params, l), a->ln2, y, rows);
  if (st != WEFT_SUCCESS) return st;
  be->add(y, a->xmid, (size_t)rows * d);
  return WEFT_SUCCESS;
}

weft_status_t moe_model_forward(moe_model *m, const int *tokens, const int *targets, int B, int T) {
  gpt_model *g = m->g;
  int L = m->layers;
  g->B = B;
  g->T = T;
  g->tokens = tokens;
  g->targets = targets;
  gpt_embed_forward(g, m->params, tokens, g->res[0], B, T);
  m->aux = 0.0;
  for (int l = 0; l < L; l++) {
    weft_status_t st = block_forward(m, l, g->res[l], g->res[l + 1], B, T);
    if (st != WEFT_SUCCESS) return st;
    m->aux += m->moe[l].aux;
  }
  gpt_head_forward(g, m->params + m->lay.unit_offset[L + 1], m->params, g->res[L], targets, B, T);
  m->ce = g->loss;
  return WEFT_SUCCESS;
}

/* dy -> dx in place (dy is g->dres[0]); dxmid lives in g->dres[1]. */
static weft_status_t block_backward(moe_model *m, int l, float *dy) {
  gpt_model *g = m->g;
  const gpt_backend *be = g->be;
  const gpt_block_acts *a = &g->acts[l];
  const float *p = moe_block_ptr(m, m->params, l);
  float *gb = moe_block_ptr(m, m->grads, l), *dxmid = g->dres[1];
  int d = m->mc.dmodel, rows = g->B * g->T;
  weft_status_t st = moe_layer_backward(&m->moe[l], &m->scr, &m->ex, be, p + m->blk_router,
                                        moe_experts_ptr(m, m->params, l), gb + m->blk_router,
                                        moe_experts_ptr(m, m->grads, l), a->ln2, dy, m->dln2);
  if (st != WEFT_SUCCESS) return st;
  memcpy(dxmid, dy, (size_t)rows * d * sizeof(float));
  be->layernorm_bwd(dxmid, gb + m->blk_ln2, gb + m->blk_ln2 + d, m->dln2, a->xmid, p + m->blk_ln2, a->ln2_mean,
                    a->ln2_rstd, rows, d);
  gpt_attn_backward(g, l, p, gb, dxmid, dy, g->B, g->T);
  return WEFT_SUCCESS;
}

weft_status_t moe_model_backward(moe_model *m) {
  gpt_model *g = m->g;
  int L = m->layers;
  float *dx = g->dres[0];
  gpt_head_backward(g, m->params + m->lay.unit_offset[L + 1], m->params, m->grads + m->lay.unit_offset[L + 1],
                    m->grads, dx, g->B, g->T);
  for (int l = L - 1; l >= 0; l--) {
    weft_status_t st = block_backward(m, l, dx);
    if (st != WEFT_SUCCESS) return st;
  }
  gpt_embed_backward(g, m->grads, g->tokens, dx, g->B, g->T);
  float inv = 1.0f / (float)m->ex.nranks;
  for (size_t i = m->rep_total; i < m->lay.total && m->ex.nranks > 1; i++)
    m->grads[i] *= inv;
  return WEFT_SUCCESS;
}

/* ------------------------------------------------------------------ gather, counts */

size_t moe_model_full_size(const moe_model *m) {
  return m->rep_total + (size_t)m->layers * m->mc.experts * m->expert_size;
}

weft_status_t moe_model_gather(moe_model *m, float *out) {
  size_t local = m->lay.total - m->rep_total, esz = m->expert_size;
  int N = m->ex.nranks, El = m->moe[0].nlocal, E = m->mc.experts;
  if (N == 1) {
    memcpy(out, m->params, m->lay.total * sizeof(float));
    return WEFT_SUCCESS;
  }
  float *all = m->ex.rank == 0 ? malloc(local * N * sizeof(float)) : NULL;
  if (m->ex.rank == 0 && !all) return WEFT_ERR_NO_MEMORY;
  weft_status_t st = weft_gather(m->params + m->rep_total, all, local, WEFT_FLOAT32, 0, m->ex.comm, NULL);
  if (st == WEFT_SUCCESS && m->ex.rank == 0) {
    memcpy(out, m->params, m->rep_total * sizeof(float));
    for (int r = 0; r < N; r++) /* [r][l][j] -> [l][r El + j] */
      for (int l = 0; l < m->layers; l++)
        memcpy(out + m->rep_total + ((size_t)l * E + (size_t)r * El) * esz,
               all + (size_t)r * local + (size_t)l * El * esz, El * esz * sizeof(float));
  }
  free(all);
  return st;
}

size_t moe_num_params_active(const gpt_config *c, const moe_config *mc) {
  size_t d = (size_t)c->dmodel, dense_mlp = 8 * d * d + 5 * d; /* fc, fcproj with biases */
  size_t per_block = gpt_num_params_nonembedding(&(gpt_config){.vocab = 0, .layers = 1, .dmodel = c->dmodel,
                                                                 .heads = c->heads, .seq = c->seq}) -
                     2 * d - dense_mlp; /* ln1, attention, ln2 */
  return (size_t)c->vocab * d + (size_t)c->layers * (per_block + d * mc->experts + mc->topk * moe_expert_size(mc)) +
         2 * d;
}

double moe_flops_per_token(const gpt_config *c, const moe_config *mc) {
  double L = c->layers, H = c->heads, Q = (double)c->dmodel / c->heads, T = c->seq;
  return 6.0 * (double)moe_num_params_active(c, mc) + 12.0 * L * H * Q * T;
}

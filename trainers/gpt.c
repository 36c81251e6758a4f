/* trainers/gpt.c: layout, initialisation, forward and backward of the reference GPT (gpt.h).
 *
 * All FLOPs go through the backend (backend.h); nearly all of them are sgemm calls:
 * per block 4 weight products forward (qkv, proj, fc, fcproj) and 8 backward, plus per
 * (sequence, head) two T x T x Q products forward (q k^T, p v) and four backward. The
 * heads are read in place from the [BT, 3d] qkv matrix with leading dimension 3d. With the
 * CPU backend, attention runs in its causal kernels instead (backend_cpu.h: half the FLOPs,
 * no per-head sgemm calls); the gemm path stays for any other backend. Linear layers start
 * from the bias and accumulate the product onto it.
 */
#include "trainers/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainers/backend_cpu.h"
#include "trainers/rng.h"

static const char *const block_names[GPT_BLOCK_NTENSORS] = {
    "ln1_w", "ln1_b", "qkv_w", "qkv_b", "proj_w",   "proj_b",
    "ln2_w", "ln2_b", "fc_w",  "fc_b",  "fcproj_w", "fcproj_b",
};

int gpt_config_check(const gpt_config *c, char *err, size_t errlen) {
  const char *why = NULL;
  if (c->vocab < 2 || c->vocab > 256)
    why = "vocab must be in 2..256 (character-level)";
  else if (c->seq < 1 || c->layers < 1 || c->dmodel < 1 || c->heads < 1)
    why = "seq, layers, dmodel and heads must be positive";
  else if (c->dmodel % c->heads)
    why = "dmodel must be a multiple of heads";
  if (!why) return 0;
  if (err)
    snprintf(err, errlen, "bad model config (vocab %d seq %d layers %d dmodel %d heads %d): %s", c->vocab,
             c->seq, c->layers, c->dmodel, c->heads, why);
  return -1;
}

static void block_sizes(int d, size_t sz[GPT_BLOCK_NTENSORS]) {
  size_t dd = (size_t)d;
  size_t s[GPT_BLOCK_NTENSORS] = {dd, dd, dd * 3 * dd, 3 * dd, dd * dd,     dd,
                                  dd, dd, dd * 4 * dd, 4 * dd, 4 * dd * dd, dd};
  memcpy(sz, s, sizeof(s));
}

void gpt_layout_add_tensor(gpt_layout *lay, const char *name, size_t *off, size_t size, int unit, int decay) {
  gpt_tensor *t = &lay->tensors[lay->ntensors++];
  snprintf(t->name, sizeof(t->name), "%s", name);
  t->offset = *off;
  t->size = size;
  t->unit = unit;
  t->decay = decay;
  *off += size;
}

static int layout_init(gpt_layout *lay, const gpt_config *c) {
  int L = c->layers;
  size_t d = (size_t)c->dmodel, off = 0, sz[GPT_BLOCK_NTENSORS];
  lay->nunits = L + 2;
  lay->unit_offset = calloc((size_t)lay->nunits + 1, sizeof(size_t));
  lay->tensors = calloc((size_t)(4 + GPT_BLOCK_NTENSORS * L), sizeof(gpt_tensor));
  if (!lay->unit_offset || !lay->tensors) return -1;
  block_sizes(c->dmodel, sz);
  lay->block_size = 0;
  for (int i = 0; i < GPT_BLOCK_NTENSORS; i++) {
    lay->block_off[i] = lay->block_size;
    lay->block_size += sz[i];
  }
  gpt_layout_add_tensor(lay, "wte", &off, (size_t)c->vocab * d, 0, 1);
  gpt_layout_add_tensor(lay, "wpe", &off, (size_t)c->seq * d, 0, 1);
  for (int l = 0; l < L; l++) {
    lay->unit_offset[1 + l] = off;
    for (int i = 0; i < GPT_BLOCK_NTENSORS; i++) {
      char name[32];
      snprintf(name, sizeof(name), "h%d.%s", l, block_names[i]);
      int decay = i == GPT_QKV_W || i == GPT_PROJ_W || i == GPT_FC_W || i == GPT_FCPROJ_W;
      gpt_layout_add_tensor(lay, name, &off, sz[i], 1 + l, decay);
    }
  }
  lay->unit_offset[L + 1] = off;
  gpt_layout_add_tensor(lay, "lnf_w", &off, d, L + 1, 0);
  gpt_layout_add_tensor(lay, "lnf_b", &off, d, L + 1, 0);
  lay->unit_offset[L + 2] = off;
  lay->total = off;
  return 0;
}

int gpt_block_acts_alloc(gpt_block_acts *a, const gpt_config *cfg, int batch, int T) {
  size_t BT = (size_t)batch * T, d = (size_t)cfg->dmodel, H = (size_t)cfg->heads;
  int ok = 1;
#define ALLOC(p, n) ((p) = calloc((n), sizeof(float)), ok &= (p) != NULL)
  ALLOC(a->ln1, BT * d);
  ALLOC(a->ln1_mean, BT);
  ALLOC(a->ln1_rstd, BT);
  ALLOC(a->qkv, BT * 3 * d);
  ALLOC(a->probs, (size_t)batch * H * T * T);
  ALLOC(a->atty, BT * d);
  ALLOC(a->xmid, BT * d);
  ALLOC(a->ln2, BT * d);
  ALLOC(a->ln2_mean, BT);
  ALLOC(a->ln2_rstd, BT);
  ALLOC(a->dgelu, BT * 4 * d);
  ALLOC(a->gelu, BT * 4 * d);
#undef ALLOC
  return ok ? 0 : -1;
}

void gpt_block_acts_free(gpt_block_acts *a) {
  float *bufs[] = {a->ln1,  a->ln1_mean, a->ln1_rstd, a->qkv,      a->probs, a->atty,
                   a->xmid, a->ln2,      a->ln2_mean, a->ln2_rstd, a->dgelu, a->gelu};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
    free(bufs[i]);
}

/* Activation memory: one allocation per array keeps the code plain; sizes are B*T rows. */
static int acts_alloc(gpt_model *m) {
  size_t BT = (size_t)m->max_batch * m->cfg.seq, d = (size_t)m->cfg.dmodel, T = (size_t)m->cfg.seq;
  size_t L = (size_t)m->cfg.layers;
  int ok = 1;
#define ALLOC(p, n) ((p) = calloc((n), sizeof(*(p))), ok &= (p) != NULL)
  ALLOC(m->res, L + 1);
  ALLOC(m->acts, L);
  if (!ok) return -1;
  for (size_t l = 0; l <= L; l++)
    ALLOC(m->res[l], BT * d);
  for (size_t l = 0; l < L; l++)
    ok &= gpt_block_acts_alloc(&m->acts[l], &m->cfg, m->max_batch, m->cfg.seq) == 0;
  ALLOC(m->lnf, BT * d);
  ALLOC(m->lnf_mean, BT);
  ALLOC(m->lnf_rstd, BT);
  ALLOC(m->logits, BT * (size_t)m->cfg.vocab);
  ALLOC(m->dres[0], BT * d);
  ALLOC(m->dres[1], BT * d);
  ALLOC(m->scratch_d, BT * d);
  ALLOC(m->scratch_3d, BT * 3 * d);
  ALLOC(m->scratch_4d, BT * 4 * d);
  ALLOC(m->scratch_tt, T * T);
#undef ALLOC
  return ok ? 0 : -1;
}

gpt_model *gpt_model_create(const gpt_config *cfg, int max_batch, const gpt_backend *be, char *err,
                            size_t errlen) {
  if (gpt_config_check(cfg, err, errlen)) return NULL;
  if (max_batch < 1) {
    snprintf(err, errlen, "bad batch size %d", max_batch);
    return NULL;
  }
  gpt_model *m = calloc(1, sizeof(*m));
  if (!m) goto oom;
  m->cfg = *cfg;
  m->be = be;
  m->max_batch = max_batch;
  if (layout_init(&m->lay, cfg)) goto oom;
  m->params = calloc(m->lay.total, sizeof(float));
  m->grads = calloc(m->lay.total, sizeof(float));
  if (!m->params || !m->grads || acts_alloc(m)) goto oom;
  return m;
oom:
  if (err)
    snprintf(err, errlen, "out of memory allocating the model (batch %d, seq %d, dmodel %d)", max_batch,
             cfg->seq, cfg->dmodel);
  gpt_model_free(m);
  return NULL;
}

void gpt_model_free(gpt_model *m) {
  if (!m) return;
  for (int l = 0; m->acts && l < m->cfg.layers; l++)
    gpt_block_acts_free(&m->acts[l]);
  for (int l = 0; m->res && l <= m->cfg.layers; l++)
    free(m->res[l]);
  float *bufs[] = {m->params,  m->grads,   m->lnf,       m->lnf_mean,   m->lnf_rstd,   m->logits,
                   m->dres[0], m->dres[1], m->scratch_d, m->scratch_3d, m->scratch_4d, m->scratch_tt};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
    free(bufs[i]);
  free(m->res);
  free(m->acts);
  free(m->lay.unit_offset);
  free(m->lay.tensors);
  free(m);
}

void gpt_init_params(gpt_model *m, uint64_t seed) {
  gpt_rng rng;
  gpt_rng_seed(&rng, seed);
  double resid_std = 0.02 / sqrt(2.0 * m->cfg.layers);
  for (int i = 0; i < m->lay.ntensors; i++) {
    const gpt_tensor *t = &m->lay.tensors[i];
    float *p = m->params + t->offset;
    const char *dot = strchr(t->name, '.');
    const char *base = dot ? dot + 1 : t->name;
    int is_ln_w = !strcmp(base, "ln1_w") || !strcmp(base, "ln2_w") || !strcmp(base, "lnf_w");
    int is_resid = !strcmp(base, "proj_w") || !strcmp(base, "fcproj_w");
    int is_matrix = t->decay;
    double std = is_resid ? resid_std : 0.02;
    for (size_t j = 0; j < t->size; j++)
      p[j] = is_ln_w ? 1.0f : is_matrix ? (float)(std * gpt_rng_normal(&rng)) : 0.0f;
  }
}

void gpt_zero_grad(gpt_model *m) {
  memset(m->grads, 0, m->lay.total * sizeof(float));
}

/* ---------------------------------------------------------------- embeddings */

void gpt_embed_forward(gpt_model *m, const float *p, const int *tokens, float *x0, int B, int T) {
  int d = m->cfg.dmodel;
  const float *wte = p, *wpe = p + (size_t)m->cfg.vocab * d;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      size_t r = (size_t)b * T + t;
      const float *te = wte + (size_t)tokens[r] * d, *pe = wpe + (size_t)t * d;
      for (int j = 0; j < d; j++)
        x0[r * d + j] = te[j] + pe[j];
    }
}

void gpt_embed_backward(gpt_model *m, float *g, const int *tokens, const float *dx0, int B, int T) {
  int d = m->cfg.dmodel;
  float *gte = g, *gpe = g + (size_t)m->cfg.vocab * d;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      size_t r = (size_t)b * T + t;
      m->be->add(gte + (size_t)tokens[r] * d, dx0 + r * d, (size_t)d);
      m->be->add(gpe + (size_t)t * d, dx0 + r * d, (size_t)d);
    }
}

/* ---------------------------------------------------------------- attention */

/* For each sequence b and head h: S = Q K^T, P = causal softmax(S / sqrt(Q)), Y = P V.
 * The CPU backend does it in one call on the causal triangle only (backend_cpu.h); any other
 * backend, or that call out of memory, takes the generic path of full-square gemms. */
static void attention_forward(gpt_model *m, gpt_block_acts *a, int B, int T) {
  const gpt_backend *be = m->be;
  int d = m->cfg.dmodel, H = m->cfg.heads, hd = d / H, ld = 3 * d;
  float scale = 1.0f / sqrtf((float)hd);
  if (gpt_backend_is_cpu(be) && !gpt_cpu_attention_fwd(a->qkv, a->probs, a->atty, B, T, H, hd, scale)) return;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const float *q = a->qkv + (size_t)b * T * ld + (size_t)h * hd;
      const float *k = q + d, *v = q + 2 * d;
      float *p = a->probs + ((size_t)b * H + h) * T * T;
      be->gemm(false, true, T, T, hd, 1.0f, q, ld, k, ld, 0.0f, p, T);
      be->softmax_causal_fwd(p, p, T, scale);
      float *y = a->atty + (size_t)b * T * d + (size_t)h * hd;
      be->gemm(false, false, T, hd, T, 1.0f, p, T, v, ld, 0.0f, y, d);
    }
}

/* dP = dY V^T, dV = P^T dY, dS = softmax_bwd(P, dP), dQ = dS K, dK = dS^T Q. */
static void attention_backward(gpt_model *m, const gpt_block_acts *a, const float *datty, float *dqkv, int B,
                               int T) {
  const gpt_backend *be = m->be;
  int d = m->cfg.dmodel, H = m->cfg.heads, hd = d / H, ld = 3 * d;
  float scale = 1.0f / sqrtf((float)hd), *ds = m->scratch_tt;
  if (gpt_backend_is_cpu(be) && !gpt_cpu_attention_bwd(a->qkv, a->probs, datty, dqkv, B, T, H, hd, scale)) return;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      size_t qoff = (size_t)b * T * ld + (size_t)h * hd;
      const float *q = a->qkv + qoff, *k = q + d, *v = q + 2 * d;
      float *dq = dqkv + qoff, *dk = dq + d, *dv = dq + 2 * d;
      const float *p = a->probs + ((size_t)b * H + h) * T * T;
      const float *dy = datty + (size_t)b * T * d + (size_t)h * hd;
      be->gemm(false, true, T, T, hd, 1.0f, dy, d, v, ld, 0.0f, ds, T);
      be->gemm(true, false, T, hd, T, 1.0f, p, T, dy, d, 0.0f, dv, ld);
      be->softmax_causal_bwd(ds, p, ds, T, scale);
      be->gemm(false, false, T, hd, T, 1.0f, ds, T, k, ld, 0.0f, dq, ld);
      be->gemm(true, false, T, hd, T, 1.0f, ds, T, q, ld, 0.0f, dk, ld);
    }
}

/* ---------------------------------------------------------------- blocks */

/* out[rows, n] = in[rows, k] W[k, n] + bias (+ resid[rows, n] when not NULL: the residual
 * connection after the layer). The bias, and the residual with it, is written into every
 * row first and the product accumulated onto it (beta 1): one pass instead of sgemm's
 * zeroing pass for beta 0 plus read-modify-write passes adding bias and residual. */
static void linear_fwd(const gpt_backend *be, float *out, const float *in, const float *w, const float *bias,
                       const float *resid, int rows, int k, int n) {
  if (resid)
    be->residual_bias(out, resid, bias, rows, n);
  else
    for (int r = 0; r < rows; r++) memcpy(out + (size_t)r * n, bias, (size_t)n * sizeof(float));
  be->gemm(false, false, rows, n, k, 1.0f, in, k, w, n, 1.0f, out, n);
}

/* din = dout W^T (writes, or adds when accumulate), dW += in^T dout, dbias += sum dout
 * (unless dbias is NULL: the caller summed it already). */
static void linear_bwd(const gpt_backend *be, float *din, int accumulate, float *dw, float *dbias,
                       const float *dout, const float *in, const float *w, int rows, int k, int n) {
  be->gemm(false, true, rows, k, n, 1.0f, dout, n, w, n, accumulate ? 1.0f : 0.0f, din, k);
  be->gemm(true, false, k, n, rows, 1.0f, in, k, dout, n, 1.0f, dw, n);
  if (dbias) be->bias_grad(dbias, dout, rows, n);
}

void gpt_attn_forward(gpt_model *m, int l, const float *p, const float *x, int B, int T) {
  const gpt_backend *be = m->be;
  gpt_block_acts *a = &m->acts[l];
  const size_t *o = m->lay.block_off;
  int d = m->cfg.dmodel, rows = B * T;
  a->x = (float *)x;
  be->layernorm_fwd(a->ln1, a->ln1_mean, a->ln1_rstd, x, p + o[GPT_LN1_W], p + o[GPT_LN1_B], rows, d);
  linear_fwd(be, a->qkv, a->ln1, p + o[GPT_QKV_W], p + o[GPT_QKV_B], NULL, rows, d, 3 * d);
  attention_forward(m, a, B, T);
  linear_fwd(be, a->xmid, a->atty, p + o[GPT_PROJ_W], p + o[GPT_PROJ_B], x, rows, d, d);
}

void gpt_block_forward(gpt_model *m, int l, const float *p, const float *x, float *y, int B, int T) {
  const gpt_backend *be = m->be;
  gpt_block_acts *a = &m->acts[l];
  const size_t *o = m->lay.block_off;
  int d = m->cfg.dmodel, rows = B * T;
  size_t n = (size_t)rows * d;
  gpt_attn_forward(m, l, p, x, B, T);
  be->layernorm_fwd(a->ln2, a->ln2_mean, a->ln2_rstd, a->xmid, p + o[GPT_LN2_W], p + o[GPT_LN2_B], rows, d);
  /* The pre-activation lives in the backward's scratch only until the GELU has read it. */
  linear_fwd(be, m->scratch_4d, a->ln2, p + o[GPT_FC_W], p + o[GPT_FC_B], NULL, rows, d, 4 * d);
  be->gelu_fwd(a->gelu, a->dgelu, m->scratch_4d, n * 4);
  linear_fwd(be, y, a->gelu, p + o[GPT_FCPROJ_W], p + o[GPT_FCPROJ_B], a->xmid, rows, 4 * d, d);
}

void gpt_block_backward(gpt_model *m, int l, const float *p, float *g, const float *dy, float *dx, int B,
                        int T) {
  const gpt_backend *be = m->be;
  const gpt_block_acts *a = &m->acts[l];
  const size_t *o = m->lay.block_off;
  int d = m->cfg.dmodel, rows = B * T;
  size_t n = (size_t)rows * d;
  float *dxmid = m->scratch_d, *d4 = m->scratch_4d;

  /* MLP half: the residual passes dy straight to xmid; the MLP adds its part. */
  memcpy(dxmid, dy, n * sizeof(float));
  linear_bwd(be, d4, 0, g + o[GPT_FCPROJ_W], g + o[GPT_FCPROJ_B], dy, a->gelu, p + o[GPT_FCPROJ_W], rows,
             4 * d, d);
  be->gelu_bwd(d4, g + o[GPT_FC_B], a->dgelu, d4, rows, 4 * d); /* and the fc bias gradient */
  linear_bwd(be, dx, 0, g + o[GPT_FC_W], NULL, d4, a->ln2, p + o[GPT_FC_W], rows, d, 4 * d);
  be->layernorm_bwd(dxmid, g + o[GPT_LN2_W], g + o[GPT_LN2_B], dx, a->xmid, p + o[GPT_LN2_W], a->ln2_mean,
                    a->ln2_rstd, rows, d);

  gpt_attn_backward(m, l, p, g, dxmid, dx, B, T);
}

void gpt_attn_backward(gpt_model *m, int l, const float *p, float *g, const float *dxmid, float *dx, int B,
                       int T) {
  const gpt_backend *be = m->be;
  const gpt_block_acts *a = &m->acts[l];
  const size_t *o = m->lay.block_off;
  int d = m->cfg.dmodel, rows = B * T;
  float *datty = m->scratch_4d, *d3 = m->scratch_3d, *dln1 = m->scratch_d; /* [BT, d] fits in [BT, 4d] */
  /* The residual passes dxmid straight to x; the attention adds its part at the end. */
  if (dx != dxmid) memcpy(dx, dxmid, (size_t)rows * d * sizeof(float));
  linear_bwd(be, datty, 0, g + o[GPT_PROJ_W], g + o[GPT_PROJ_B], dxmid, a->atty, p + o[GPT_PROJ_W], rows, d,
             d);
  attention_backward(m, a, datty, d3, B, T);
  /* dxmid is read for the last time above, so dln1 may reuse scratch_d even when dxmid is it. */
  linear_bwd(be, dln1, 0, g + o[GPT_QKV_W], g + o[GPT_QKV_B], d3, a->ln1, p + o[GPT_QKV_W], rows, d, 3 * d);
  be->layernorm_bwd(dx, g + o[GPT_LN1_W], g + o[GPT_LN1_B], dln1, a->x, p + o[GPT_LN1_W], a->ln1_mean,
                    a->ln1_rstd, rows, d);
}

/* ---------------------------------------------------------------- head */

static float head_forward(gpt_model *m, const float *p_final, const float *p_embed, const float *x,
                          const int *targets, int B, int T, int want_grad) {
  const gpt_backend *be = m->be;
  int d = m->cfg.dmodel, V = m->cfg.vocab, rows = B * T;
  be->layernorm_fwd(m->lnf, m->lnf_mean, m->lnf_rstd, x, p_final, p_final + d, rows, d);
  be->gemm(false, true, rows, V, d, 1.0f, m->lnf, d, p_embed, d, 0.0f, m->logits, V);
  m->loss = be->cross_entropy(want_grad ? m->logits : NULL, m->logits, targets, rows, V);
  return (float)m->loss;
}

float gpt_head_forward(gpt_model *m, const float *p_final, const float *p_embed, const float *x,
                       const int *targets, int B, int T) {
  m->head_x = x;
  return head_forward(m, p_final, p_embed, x, targets, B, T, 1);
}

/* The forward left dlogits in m->logits. dh = dlogits Wte, dWte += dlogits^T h. */
void gpt_head_backward(gpt_model *m, const float *p_final, const float *p_embed, float *g_final,
                       float *g_embed, float *dx, int B, int T) {
  const gpt_backend *be = m->be;
  int d = m->cfg.dmodel, V = m->cfg.vocab, rows = B * T;
  float *dlnf = m->scratch_d;
  be->gemm(false, false, rows, d, V, 1.0f, m->logits, V, p_embed, d, 0.0f, dlnf, d);
  be->gemm(true, false, V, d, rows, 1.0f, m->logits, V, m->lnf, d, 1.0f, g_embed, d);
  memset(dx, 0, (size_t)rows * d * sizeof(float));
  be->layernorm_bwd(dx, g_final, g_final + d, dlnf, m->head_x, p_final, m->lnf_mean, m->lnf_rstd, rows, d);
}

/* ---------------------------------------------------------------- whole model */

static float model_forward(gpt_model *m, const int *tokens, const int *targets, int B, int T, int want_grad) {
  int L = m->cfg.layers;
  m->B = B;
  m->T = T;
  m->tokens = tokens;
  m->targets = targets;
  gpt_embed_forward(m, gpt_unit_ptr(m, m->params, 0), tokens, m->res[0], B, T);
  for (int l = 0; l < L; l++)
    gpt_block_forward(m, l, gpt_unit_ptr(m, m->params, 1 + l), m->res[l], m->res[l + 1], B, T);
  m->head_x = m->res[L];
  return head_forward(m, gpt_unit_ptr(m, m->params, L + 1), gpt_unit_ptr(m, m->params, 0), m->res[L], targets,
                      B, T, want_grad);
}

float gpt_forward(gpt_model *m, const int *tokens, const int *targets, int B, int T) {
  return model_forward(m, tokens, targets, B, T, 1);
}

float gpt_eval_loss(gpt_model *m, const int *tokens, const int *targets, int B, int T) {
  return model_forward(m, tokens, targets, B, T, 0);
}

void gpt_backward(gpt_model *m) {
  int L = m->cfg.layers, B = m->B, T = m->T;
  float *g_embed = gpt_unit_ptr(m, m->grads, 0), *dx = m->dres[0];
  gpt_head_backward(m, gpt_unit_ptr(m, m->params, L + 1), gpt_unit_ptr(m, m->params, 0),
                    gpt_unit_ptr(m, m->grads, L + 1), g_embed, dx, B, T);
  for (int l = L - 1; l >= 0; l--)
    gpt_block_backward(m, l, gpt_unit_ptr(m, m->params, 1 + l), gpt_unit_ptr(m, m->grads, 1 + l), dx, dx, B,
                       T);
  gpt_embed_backward(m, g_embed, m->tokens, dx, B, T);
}

/* ---------------------------------------------------------------- counts */

size_t gpt_num_params_nonembedding(const gpt_config *c) {
  size_t d = (size_t)c->dmodel, sz[GPT_BLOCK_NTENSORS], block = 0;
  block_sizes(c->dmodel, sz);
  for (int i = 0; i < GPT_BLOCK_NTENSORS; i++)
    block += sz[i];
  return (size_t)c->vocab * d + (size_t)c->layers * block + 2 * d;
}

double gpt_flops_per_token(const gpt_config *c) {
  double N = (double)gpt_num_params_nonembedding(c);
  double L = c->layers, H = c->heads, Q = (double)c->dmodel / c->heads, T = c->seq;
  return 6.0 * N + 12.0 * L * H * Q * T;
}

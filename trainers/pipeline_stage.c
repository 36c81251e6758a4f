/* trainers/pipeline_stage.c: one stage of weft-train-pipeline; see pipeline_stage.h.
 *
 * A step on stage s: receive the inputs of op 0; then for each op i compute it, and launch
 * the sends of op i with the receives of op i + 1 as one weft group. Bytes per step: each
 * stage boundary carries M activation messages forward and M gradient messages back, of
 * mb*T*d floats each; the first and last stage also swap V*d floats of wte gradient.
 */
#include "trainers/pipeline_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainers/metrics.h"

#define P_(p, u) gpt_unit_ptr((p)->base, (p)->base->params, (u))
#define G_(p, u) gpt_unit_ptr((p)->base, (p)->base->grads, (u))

static int is_last(const pp_stage *p) { return p->s == p->P - 1; }

/* ---------------------------------------------------------------- activation sets */

/* A shallow copy of the base model with its own activations for blocks
 * [first, first + n) (residual streams res[first .. first + n]) and, on the last stage,
 * the head's. Everything else stays NULL. */
static int slot_init(const pp_stage *p, gpt_model *m) {
  const gpt_model *b = p->base;
  size_t BT = (size_t)p->mb * p->T, d = (size_t)b->cfg.dmodel;
  int L = b->cfg.layers, ok = 1;
  *m = *b;
  m->lnf = m->lnf_mean = m->lnf_rstd = m->logits = NULL;
  m->res = calloc((size_t)L + 1, sizeof(float *));
  m->acts = calloc((size_t)L, sizeof(gpt_block_acts));
  if (!m->res || !m->acts) return -1;
#define ALLOC(q, n) ((q) = calloc((n), sizeof(float)), ok &= (q) != NULL)
  for (int l = p->first; l <= p->first + p->nblocks; l++) ALLOC(m->res[l], BT * d);
  for (int l = p->first; l < p->first + p->nblocks; l++)
    ok &= gpt_block_acts_alloc(&m->acts[l], &b->cfg, p->mb, p->T) == 0;
  if (is_last(p)) {
    ALLOC(m->lnf, BT * d);
    ALLOC(m->lnf_mean, BT);
    ALLOC(m->lnf_rstd, BT);
    ALLOC(m->logits, BT * (size_t)b->cfg.vocab);
  }
#undef ALLOC
  return ok ? 0 : -1;
}

static void slot_free(gpt_model *m, int L) {
  for (int l = 0; m->acts && l < L; l++) gpt_block_acts_free(&m->acts[l]);
  for (int l = 0; m->res && l <= L; l++) free(m->res[l]);
  free(m->res);
  free(m->acts);
  free(m->lnf);
  free(m->lnf_mean);
  free(m->lnf_rstd);
  free(m->logits);
}

/* ---------------------------------------------------------------- setup */

static void set_ranges(pp_stage *p) {
  const gpt_layout *lay = &p->base->lay;
  const size_t *off = lay->unit_offset;
  size_t lo = p->s == 0 ? 0 : off[1 + p->first];
  size_t hi = is_last(p) ? lay->total : off[1 + p->first + p->nblocks];
  p->ranges[0] = (pp_range){lo, hi, 0};
  p->nranges = 1;
  /* tensors[0] is wte (gpt.c's layout); stage 0 already owns it. */
  if (is_last(p) && p->s > 0)
    p->ranges[p->nranges++] =
        (pp_range){lay->tensors[0].offset, lay->tensors[0].offset + lay->tensors[0].size, 1};
}

static int alloc_buffers(pp_stage *p) {
  p->ops = calloc((size_t)2 * p->M, sizeof(pp_op));
  if (!p->ops) return -1;
  p->nops = pp_schedule_ops(p->sched, p->s, p->P, p->M, p->ops);
  p->nslots = pp_max_in_flight(p->ops, p->nops);
  p->slots = calloc((size_t)p->nslots, sizeof(gpt_model));
  p->gbuf[0] = calloc(p->msg, sizeof(float));
  p->gbuf[1] = calloc(p->msg, sizeof(float));
  p->wte_tmp = calloc(p->base->lay.tensors[0].size, sizeof(float));
  if (!p->slots || !p->gbuf[0] || !p->gbuf[1] || !p->wte_tmp) return -1;
  for (int i = 0; i < p->nslots; i++)
    if (slot_init(p, &p->slots[i])) return -1;
  return 0;
}

int pp_stage_init(pp_stage *p, gpt_model *base, weft_comm_t comm, int s, int P, int M, int mb,
                  pp_schedule sched, char *err, size_t errlen) {
  *p = (pp_stage){
      .base = base, .comm = comm, .s = s, .P = P, .M = M, .mb = mb, .T = base->cfg.seq, .sched = sched};
  if (mb > base->max_batch) {
    snprintf(err, errlen, "stage %d: microbatch %d exceeds the model's batch %d", s, mb, base->max_batch);
    return -1;
  }
  if (pp_stage_blocks(base->cfg.layers, P, s, &p->first, &p->nblocks)) {
    snprintf(err, errlen, "%d layers cannot fill %d pipeline stages (at least one block per stage)",
             base->cfg.layers, P);
    return -1;
  }
  p->msg = (size_t)mb * p->T * base->cfg.dmodel;
  set_ranges(p);
  if (alloc_buffers(p)) {
    snprintf(err, errlen, "stage %d: out of memory for %d activation sets of %d sequences", s, p->nslots, mb);
    return -1;
  }
  return 0;
}

void pp_stage_free(pp_stage *p) {
  for (int i = 0; p->slots && i < p->nslots; i++) slot_free(&p->slots[i], p->base->cfg.layers);
  free(p->slots);
  free(p->ops);
  free(p->gbuf[0]);
  free(p->gbuf[1]);
  free(p->wte_tmp);
  memset(p, 0, sizeof(*p));
}

/* ---------------------------------------------------------------- compute */

static gpt_model *slot_of(const pp_stage *p, int k) { return &p->slots[k % p->nslots]; }

static void forward(pp_stage *p, gpt_model *m, const int *x, const int *y) {
  int L = p->base->cfg.layers, B = p->mb, T = p->T;
  if (p->s == 0) gpt_embed_forward(m, P_(p, 0), x, m->res[0], B, T);
  for (int l = p->first; l < p->first + p->nblocks; l++)
    gpt_block_forward(m, l, P_(p, 1 + l), m->res[l], m->res[l + 1], B, T);
  if (is_last(p)) {
    gpt_head_forward(m, P_(p, L + 1), P_(p, 0), m->res[L], y, B, T);
    p->loss_sum += m->loss;
  }
}

/* Backward of microbatch k; its output gradient is in (or, on the last stage, goes to)
 * gbuf[k & 1], and its input gradient replaces it there. */
static void backward(pp_stage *p, int k) {
  gpt_model *m = slot_of(p, k);
  int L = p->base->cfg.layers, B = p->mb, T = p->T;
  float *g = p->gbuf[k & 1];
  if (is_last(p)) gpt_head_backward(m, P_(p, L + 1), P_(p, 0), G_(p, L + 1), G_(p, 0), g, B, T);
  for (int l = p->first + p->nblocks - 1; l >= p->first; l--)
    gpt_block_backward(m, l, P_(p, 1 + l), G_(p, 1 + l), g, g, B, T);
  if (p->s == 0) gpt_embed_backward(m, G_(p, 0), p->gx + (size_t)k * B * T, g, B, T);
}

static void compute(pp_stage *p, const pp_op *op) {
  size_t off = (size_t)op->mb * p->mb * p->T;
  if (op->kind == PP_FWD)
    forward(p, slot_of(p, op->mb), p->gx + off, p->gy + off);
  else
    backward(p, op->mb);
}

/* ---------------------------------------------------------------- exchanges */

/* The buffer op receives into / sends from. */
static float *recv_buf(const pp_stage *p, const pp_op *op) {
  return op->kind == PP_FWD ? slot_of(p, op->mb)->res[p->first] : p->gbuf[op->mb & 1];
}

static float *send_buf(const pp_stage *p, const pp_op *op) {
  return op->kind == PP_FWD ? slot_of(p, op->mb)->res[p->first + p->nblocks] : p->gbuf[op->mb & 1];
}

static const char *what(const pp_op *op) { return op->kind == PP_FWD ? "activations" : "gradients"; }

/* Sends of done (may be NULL) and receives of next (may be NULL) as one group. */
static int exchange(pp_stage *p, const pp_op *done, const pp_op *next, char *err, size_t errlen) {
  int to = done ? pp_op_send_peer(done, p->s, p->P) : -1;
  int from = next ? pp_op_recv_peer(next, p->s, p->P) : -1;
  if (to < 0 && from < 0) return 0;
  double t0 = gpt_now_s();
  weft_status_t st = weft_group_start(), st2 = WEFT_SUCCESS;
  if (st == WEFT_SUCCESS && to >= 0)
    st = weft_send(send_buf(p, done), p->msg, WEFT_FLOAT32, to, p->comm, NULL);
  if (st == WEFT_SUCCESS && from >= 0)
    st = weft_recv(recv_buf(p, next), p->msg, WEFT_FLOAT32, from, p->comm, NULL);
  st2 = weft_group_end();
  if (st == WEFT_SUCCESS) st = st2;
  p->wait_s += gpt_now_s() - t0;
  if (st == WEFT_SUCCESS) return 0;
  char sent[96] = "", got[96] = "";
  if (to >= 0) snprintf(sent, sizeof(sent), " send %s of microbatch %d to peer %d", what(done), done->mb, to);
  if (from >= 0)
    snprintf(got, sizeof(got), "%s receive %s of microbatch %d from peer %d", to >= 0 ? "," : "", what(next),
             next->mb, from);
  snprintf(err, errlen, "rank %d: pipeline exchange:%s%s: %s: %s", p->s, sent, got, weft_get_error_string(st),
           weft_get_last_error(p->comm));
  return -1;
}

int pp_stage_run(pp_stage *p, const int *gx, const int *gy, char *err, size_t errlen) {
  p->gx = gx;
  p->gy = gy;
  p->loss_sum = 0.0;
  p->wait_s = 0.0;
  if (exchange(p, NULL, &p->ops[0], err, errlen)) return -1;
  for (int i = 0; i < p->nops; i++) {
    compute(p, &p->ops[i]);
    if (exchange(p, &p->ops[i], i + 1 < p->nops ? &p->ops[i + 1] : NULL, err, errlen)) return -1;
  }
  return 0;
}

int pp_stage_eval(pp_stage *p, const int *x, const int *y, double *loss, char *err, size_t errlen) {
  const pp_op op = {PP_FWD, 0};
  if (exchange(p, NULL, &op, err, errlen)) return -1;
  p->loss_sum = 0.0;
  forward(p, slot_of(p, 0), x, y);
  *loss = p->loss_sum;
  return exchange(p, &op, NULL, err, errlen);
}

/* ---------------------------------------------------------------- optimizer side */

int pp_stage_tie_grads(pp_stage *p, char *err, size_t errlen) {
  if (p->P == 1 || (p->s != 0 && !is_last(p))) return 0;
  int peer = p->s == 0 ? p->P - 1 : 0;
  const gpt_tensor *wte = &p->base->lay.tensors[0];
  float *g = p->base->grads + wte->offset;
  double t0 = gpt_now_s();
  weft_status_t st = weft_group_start(), st2;
  if (st == WEFT_SUCCESS) st = weft_send(g, wte->size, WEFT_FLOAT32, peer, p->comm, NULL);
  if (st == WEFT_SUCCESS) st = weft_recv(p->wte_tmp, wte->size, WEFT_FLOAT32, peer, p->comm, NULL);
  st2 = weft_group_end();
  if (st == WEFT_SUCCESS) st = st2;
  p->wait_s += gpt_now_s() - t0;
  if (st != WEFT_SUCCESS) {
    snprintf(err, errlen, "rank %d: tied wte gradient exchange with peer %d: %s: %s", p->s, peer,
             weft_get_error_string(st), weft_get_last_error(p->comm));
    return -1;
  }
  /* a + b == b + a in IEEE arithmetic, so both ranks hold the same bits. */
  for (size_t i = 0; i < wte->size; i++) g[i] += p->wte_tmp[i];
  return 0;
}

void pp_stage_zero_grad(pp_stage *p) {
  for (int i = 0; i < p->nranges; i++)
    memset(p->base->grads + p->ranges[i].lo, 0, (p->ranges[i].hi - p->ranges[i].lo) * sizeof(float));
}

double pp_stage_grad_sumsq(const pp_stage *p) {
  double sum = 0.0;
  for (int i = 0; i < p->nranges; i++)
    if (!p->ranges[i].copy)
      sum += gpt_grad_sumsq(p->base->grads + p->ranges[i].lo, p->ranges[i].hi - p->ranges[i].lo);
  return sum;
}

void pp_stage_update(pp_stage *p, const gpt_adamw *o, long step, float *m, float *v, float grad_scale) {
  gpt_model *b = p->base;
  for (int i = 0; i < p->nranges; i++) {
    size_t lo = p->ranges[i].lo;
    gpt_adamw_update(o, step, &b->lay, lo, p->ranges[i].hi, b->params + lo, b->grads + lo, m + lo, v + lo,
                     grad_scale);
  }
}

int pp_stage_gather(pp_stage *p, const float *src, float *tmp, float *dst_on_root, char *err, size_t errlen) {
  size_t n = p->base->lay.total;
  memset(tmp, 0, n * sizeof(float));
  for (int i = 0; i < p->nranges; i++)
    if (!p->ranges[i].copy)
      memcpy(tmp + p->ranges[i].lo, src + p->ranges[i].lo,
             (p->ranges[i].hi - p->ranges[i].lo) * sizeof(float));
  /* Every float has exactly one non-zero contributor, so the sum is exact. */
  weft_status_t st =
      weft_reduce(tmp, p->s == 0 ? dst_on_root : NULL, n, WEFT_FLOAT32, WEFT_SUM, 0, p->comm, NULL);
  if (st == WEFT_SUCCESS) return 0;
  snprintf(err, errlen, "rank %d: gathering the parameters to rank 0: %s: %s", p->s,
           weft_get_error_string(st), weft_get_last_error(p->comm));
  return -1;
}

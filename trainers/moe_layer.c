/* trainers/moe_layer.c: dispatch, experts and combine of a MoE layer across ranks; see
 * moe_layer.h (routing is in moe_router.c).
 *
 * Forward, on every rank, with G local groups, N ranks, El = E/N local experts, C capacity:
 *   1. route (moe_router.c): each kept assignment (token t, expert e) has a slot < C;
 *   2. pack: row xln[t] goes to send[soff(g, e) + slot], the blocks ordered
 *      [owner rank p][group g][p's expert j] so each owner's rows are contiguous;
 *   3. all-to-all of the row counts (N x G x El int32 per rank), then all-to-allv of the
 *      rows: rank r sends sum_e kept(e on p) * d floats to p, at most G * E * C * d floats
 *      in all, and receives blocks ordered [source s][group g][expert j];
 *   4. permute into expert-major order [j][s][g] and run each local expert as three sgemm
 *      calls (fc, GELU, fcproj) on its M_j rows. Global group s * G + g lands at the same
 *      place whether groups are ranks or slices of one process, so a 1-process run with
 *      --groups N multiplies the same rows in the same order as N ranks do;
 *   5. permute the outputs back, all-to-allv them home (the reverse counts), and
 *      out[t] = sum over kept assignments of gate * row.
 * Backward: dgate = dout[t] . row and dy = gate * dout[t] go out by the forward's counts
 * (all-to-allv; the router's backward runs meanwhile), the experts compute their input
 * gradients, dx rows go back by the reverse all-to-allv while the experts' weight
 * gradients accumulate locally, and add into dxln after the router's own term. With a
 * stream (moe_exchange.cs) those two exchanges overlap that compute; the forward's
 * exchanges have nothing to overlap (what follows each needs its result).
 * Bytes per layer and step: 4 all-to-allv of the kept rows (<= k * capacity_factor * tokens
 * * d * 4 bytes each, the part to remote experts crossing ranks) and one of the counts.
 */
#include "trainers/moe_layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainers/comm_stream.h"
#include "trainers/metrics.h"
#include "trainers/moe_router.h"

size_t moe_expert_size(const moe_config *c) {
  return moe_expert_off(c, MOE_EXPERT_NTENSORS);
}

size_t moe_expert_off(const moe_config *c, int t) {
  size_t d = (size_t)c->dmodel, h = (size_t)c->hidden;
  size_t sz[MOE_EXPERT_NTENSORS] = {d * h, h, h * d, d}, off = 0;
  for (int i = 0; i < t; i++)
    off += sz[i];
  return off;
}

/* Rows any row buffer may need: G groups x E experts x C slots (sent or received). */
static size_t max_buffer_rows(const moe_config *c, int groups, int max_rows) {
  int n = max_rows / groups;
  size_t cap = (size_t)ceil((double)c->capacity_factor * c->topk * n / c->experts);
  return (size_t)groups * c->experts * (cap > 0 ? cap : 1);
}

int moe_layer_init(moe_layer *ly, const moe_config *c, int groups, int rank, int nranks, int max_rows,
                   char *err, size_t errlen) {
  memset(ly, 0, sizeof(*ly));
  ly->c = *c;
  ly->groups = groups;
  ly->rank = rank;
  ly->nranks = nranks;
  ly->nlocal = c->experts / nranks;
  ly->max_rows = max_rows;
  size_t E = (size_t)c->experts, k = (size_t)c->topk, rows = (size_t)max_rows, G = (size_t)groups;
  size_t R = max_buffer_rows(c, groups, max_rows), blocks = (size_t)nranks * G * ly->nlocal;
  int ok = 1;
#define ALLOC(p, n) ((p) = calloc((n), sizeof(*(p))), ok &= (p) != NULL)
  ALLOC(ly->probs, rows * E);
  ALLOC(ly->gate, rows * k);
  ALLOC(ly->dgate, rows * k);
  ALLOC(ly->choice, rows * k);
  ALLOC(ly->slot, rows * k);
  ALLOC(ly->kept, G * E);
  ALLOC(ly->first, G * E);
  ALLOC(ly->pmean, G * E);
  ALLOC(ly->scnt, blocks);
  ALLOC(ly->rcount, blocks);
  ALLOC(ly->soff, G * E);
  ALLOC(ly->roff, blocks);
  ALLOC(ly->xoff, blocks);
  ALLOC(ly->mstart, (size_t)ly->nlocal + 1);
  ALLOC(ly->sc, (size_t)nranks);
  ALLOC(ly->sd, (size_t)nranks);
  ALLOC(ly->rc, (size_t)nranks);
  ALLOC(ly->rd, (size_t)nranks);
  ALLOC(ly->xin, R * c->dmodel);
  ALLOC(ly->h, R * c->hidden);
  ALLOC(ly->a, R * c->hidden);
  ALLOC(ly->back, R * c->dmodel);
  ALLOC(ly->stat_routed, E);
  ALLOC(ly->stat_kept, E);
#undef ALLOC
  if (ok) return 0;
  snprintf(err, errlen, "out of memory for a MoE layer (%zu rows of %d)", R, c->hidden);
  moe_layer_free(ly);
  return -1;
}

void moe_layer_free(moe_layer *ly) {
  void *bufs[] = {ly->probs, ly->gate,  ly->dgate, ly->choice, ly->slot, ly->kept, ly->first,
                  ly->pmean, ly->scnt,  ly->rcount, ly->soff,  ly->roff, ly->xoff, ly->mstart,
                  ly->sc,    ly->sd,    ly->rc,     ly->rd,    ly->xin,  ly->h,    ly->a,
                  ly->back,  ly->stat_routed, ly->stat_kept};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
    free(bufs[i]);
  memset(ly, 0, sizeof(*ly));
}

int moe_scratch_init(moe_scratch *s, const moe_layer *ly, char *err, size_t errlen) {
  size_t R = max_buffer_rows(&ly->c, ly->groups, ly->max_rows), d = (size_t)ly->c.dmodel;
  s->send = calloc(R * d, sizeof(float));
  s->recv = calloc(R * d, sizeof(float));
  s->dy = calloc(R * d, sizeof(float));
  s->da = calloc(R * ly->c.hidden, sizeof(float));
  s->dlogits = calloc((size_t)ly->max_rows * ly->c.experts, sizeof(float));
  if (s->send && s->recv && s->dy && s->da && s->dlogits) return 0;
  snprintf(err, errlen, "out of memory for the MoE scratch buffers (%zu rows)", R);
  moe_scratch_free(s);
  return -1;
}

void moe_scratch_free(moe_scratch *s) {
  free(s->send);
  free(s->recv);
  free(s->dy);
  free(s->da);
  free(s->dlogits);
  memset(s, 0, sizeof(*s));
}

/* ------------------------------------------------------------------ exchange */

/* Starts an exchange; ex_wait finishes it. One rank: a copy. With ex->cs the all-to-allv
 * is queued on that stream; otherwise it is a blocking call, timed into comm_s. */
static weft_status_t a2av_start(moe_exchange *ex, const char *what, const float *send, const size_t *sc,
                                const size_t *sd, float *recv, const size_t *rc, const size_t *rd) {
  if (ex->nranks == 1) {
    memcpy(recv + rd[0], send + sd[0], sc[0] * sizeof(float));
    ex->pending = what;
    return WEFT_SUCCESS;
  }
  weft_status_t st;
  if (ex->cs != NULL) {
    gpt_comm_stream_begin_op(ex->cs);
    st = weft_all_to_allv(send, sc, sd, recv, rc, rd, WEFT_FLOAT32, ex->comm, ex->cs->stream);
    if (st == WEFT_SUCCESS) gpt_comm_stream_enqueued(ex->cs);
  } else {
    double t0 = gpt_now_s();
    st = weft_all_to_allv(send, sc, sd, recv, rc, rd, WEFT_FLOAT32, ex->comm, NULL);
    ex->comm_s += gpt_now_s() - t0;
  }
  if (st == WEFT_SUCCESS) ex->pending = what;
  else ex->failed = what;
  return st;
}

/* Waits for the exchange in flight, if any. */
static weft_status_t ex_wait(moe_exchange *ex) {
  const char *what = ex->pending;
  ex->pending = NULL;
  if (what == NULL || ex->nranks == 1 || ex->cs == NULL) return WEFT_SUCCESS;
  weft_status_t st = gpt_comm_stream_wait(ex->cs);
  if (st != WEFT_SUCCESS) ex->failed = what;
  return st;
}

static weft_status_t a2av(moe_exchange *ex, const char *what, const float *send, const size_t *sc,
                          const size_t *sd, float *recv, const size_t *rc, const size_t *rd) {
  weft_status_t st = a2av_start(ex, what, send, sc, sd, recv, rc, rd);
  return st == WEFT_SUCCESS ? ex_wait(ex) : st;
}

/* Send order: blocks [p][g][j]; scnt says each block's rows, sc/sd each owner's floats. */
static void plan_send(moe_layer *ly) {
  int G = ly->groups, El = ly->nlocal, E = ly->c.experts;
  size_t row = 0, d = (size_t)ly->c.dmodel;
  for (int p = 0; p < ly->nranks; p++) {
    ly->sd[p] = row * d;
    for (int g = 0; g < G; g++)
      for (int j = 0; j < El; j++) {
        int e = p * El + j, n = ly->kept[g * E + e];
        ly->soff[g * E + e] = row;
        ly->scnt[(p * G + g) * El + j] = n;
        row += (size_t)n;
      }
    ly->sc[p] = row * d - ly->sd[p];
  }
}

/* Receive order [s][g][j] (roff, rc/rd) and expert-major order [j][s][g] (xoff, mstart). */
static void plan_recv(moe_layer *ly) {
  int G = ly->groups, El = ly->nlocal, N = ly->nranks;
  size_t row = 0, d = (size_t)ly->c.dmodel;
  for (int s = 0; s < N; s++) {
    ly->rd[s] = row * d;
    for (int b = s * G * El; b < (s + 1) * G * El; b++) {
      ly->roff[b] = row;
      row += (size_t)ly->rcount[b];
    }
    ly->rc[s] = row * d - ly->rd[s];
  }
  row = 0;
  for (int j = 0; j < El; j++) {
    ly->mstart[j] = row;
    for (int s = 0; s < N; s++)
      for (int g = 0; g < G; g++) {
        int b = (s * G + g) * El + j;
        ly->xoff[b] = row;
        row += (size_t)ly->rcount[b];
      }
  }
  ly->mstart[El] = row;
}

static weft_status_t exchange_counts(moe_layer *ly, moe_exchange *ex) {
  size_t n = (size_t)ly->groups * ly->nlocal;
  if (ex->nranks == 1) {
    memcpy(ly->rcount, ly->scnt, n * sizeof(int));
    return WEFT_SUCCESS;
  }
  const char *what = "all-to-all of the expert row counts";
  weft_status_t st;
  if (ex->cs != NULL) {
    gpt_comm_stream_begin_op(ex->cs);
    st = weft_all_to_all(ly->scnt, ly->rcount, n, WEFT_INT32, ex->comm, ex->cs->stream);
    if (st == WEFT_SUCCESS) {
      gpt_comm_stream_enqueued(ex->cs);
      ex->pending = what;
      st = ex_wait(ex);
    }
  } else {
    double t0 = gpt_now_s();
    st = weft_all_to_all(ly->scnt, ly->rcount, n, WEFT_INT32, ex->comm, NULL);
    ex->comm_s += gpt_now_s() - t0;
  }
  if (st != WEFT_SUCCESS) ex->failed = what;
  return st;
}

/* Moves every received block between receive order and expert-major order. */
static void permute(const moe_layer *ly, const float *src, float *dst, int to_expert_major) {
  size_t d = (size_t)ly->c.dmodel, nb = (size_t)ly->nranks * ly->groups * ly->nlocal;
  for (size_t b = 0; b < nb; b++) {
    size_t from = to_expert_major ? ly->roff[b] : ly->xoff[b];
    size_t to = to_expert_major ? ly->xoff[b] : ly->roff[b];
    memcpy(dst + to * d, src + from * d, (size_t)ly->rcount[b] * d * sizeof(float));
  }
}

/* ------------------------------------------------------------------ experts */

static void expert_forward(const moe_layer *ly, const gpt_backend *be, const float *p, size_t lo, int M,
                           float *y) {
  const moe_config *c = &ly->c;
  int d = c->dmodel, h = c->hidden;
  const float *x = ly->xin + lo * d;
  float *hh = ly->h + lo * h, *aa = ly->a + lo * h;
  be->gemm(false, false, M, h, d, 1.0f, x, d, p + moe_expert_off(c, MOE_FC_W), h, 0.0f, hh, h);
  be->bias_add(hh, p + moe_expert_off(c, MOE_FC_B), M, h);
  be->gelu_fwd(aa, hh, hh, (size_t)M * h); /* hh: pre-activation in, GELU's derivative out */
  be->gemm(false, false, M, d, h, 1.0f, aa, h, p + moe_expert_off(c, MOE_FCPROJ_W), d, 0.0f, y, d);
  be->bias_add(y, p + moe_expert_off(c, MOE_FCPROJ_B), M, d);
}

/* The input-gradient half of an expert's backward: dy [M, d] -> da [M, hidden] (through
 * the GELU) and dx [M, d] (writes both). */
static void expert_backward_data(const moe_layer *ly, const gpt_backend *be, const float *p, size_t lo, int M,
                                 const float *dy, float *da, float *dx) {
  const moe_config *c = &ly->c;
  int d = c->dmodel, h = c->hidden;
  const float *hh = ly->h + lo * h;
  be->gemm(false, true, M, h, d, 1.0f, dy, d, p + moe_expert_off(c, MOE_FCPROJ_W), d, 0.0f, da, h);
  be->gelu_bwd(da, NULL, hh, da, M, h);
  be->gemm(false, true, M, d, h, 1.0f, da, h, p + moe_expert_off(c, MOE_FC_W), h, 0.0f, dx, d);
}

/* The weight-gradient half: accumulates the expert's gradients into g from dy and the da
 * expert_backward_data wrote. */
static void expert_backward_weights(const moe_layer *ly, const gpt_backend *be, float *g, size_t lo, int M,
                                    const float *dy, const float *da) {
  const moe_config *c = &ly->c;
  int d = c->dmodel, h = c->hidden;
  const float *x = ly->xin + lo * d, *aa = ly->a + lo * h;
  be->gemm(true, false, h, d, M, 1.0f, aa, h, dy, d, 1.0f, g + moe_expert_off(c, MOE_FCPROJ_W), d);
  be->bias_grad(g + moe_expert_off(c, MOE_FCPROJ_B), dy, M, d);
  be->gemm(true, false, d, h, M, 1.0f, x, d, da, h, 1.0f, g + moe_expert_off(c, MOE_FC_W), h);
  be->bias_grad(g + moe_expert_off(c, MOE_FC_B), da, M, h);
}

/* ------------------------------------------------------------------ layer */

/* Row of assignment (t, j) in send order, or -1 when it was dropped. */
static long send_row(const moe_layer *ly, int t, int j) {
  int k = ly->c.topk, s = ly->slot[t * k + j];
  if (s < 0) return -1;
  int g = t / (ly->rows / ly->groups), e = ly->choice[t * k + j];
  return (long)(ly->soff[(size_t)g * ly->c.experts + e] + (size_t)s);
}

static void pack_inputs(const moe_layer *ly, const float *xln, float *send) {
  size_t d = (size_t)ly->c.dmodel;
  for (int t = 0; t < ly->rows; t++)
    for (int j = 0; j < ly->c.topk; j++) {
      long r = send_row(ly, t, j);
      if (r >= 0) memcpy(send + (size_t)r * d, xln + (size_t)t * d, d * sizeof(float));
    }
}

static void combine(const moe_layer *ly, float *out) {
  int d = ly->c.dmodel, k = ly->c.topk;
  memset(out, 0, (size_t)ly->rows * d * sizeof(float));
  for (int t = 0; t < ly->rows; t++)
    for (int j = 0; j < k; j++) {
      long r = send_row(ly, t, j);
      if (r < 0) continue;
      const float *y = ly->back + (size_t)r * d;
      float w = ly->gate[t * k + j], *o = out + (size_t)t * d;
      for (int i = 0; i < d; i++)
        o[i] += w * y[i];
    }
}

weft_status_t moe_layer_forward(moe_layer *ly, moe_scratch *s, moe_exchange *ex, const gpt_backend *be,
                                const float *router_w, const float *experts, const float *xln, float *out,
                                int rows) {
  moe_router_forward(ly, be, router_w, xln, rows);
  plan_send(ly);
  pack_inputs(ly, xln, s->send);
  weft_status_t st = exchange_counts(ly, ex);
  if (st != WEFT_SUCCESS) return st;
  plan_recv(ly);
  st = a2av(ex, "dispatch all-to-allv", s->send, ly->sc, ly->sd, s->recv, ly->rc, ly->rd);
  if (st != WEFT_SUCCESS) return st;
  permute(ly, s->recv, ly->xin, 1);
  size_t esz = moe_expert_size(&ly->c), d = (size_t)ly->c.dmodel;
  for (int j = 0; j < ly->nlocal; j++) {
    size_t lo = ly->mstart[j];
    int M = (int)(ly->mstart[j + 1] - lo);
    if (M > 0) expert_forward(ly, be, experts + j * esz, lo, M, s->dy + lo * d);
  }
  permute(ly, s->dy, s->send, 0);
  st = a2av(ex, "combine all-to-allv", s->send, ly->rc, ly->rd, ly->back, ly->sc, ly->sd);
  if (st != WEFT_SUCCESS) return st;
  combine(ly, out);
  return WEFT_SUCCESS;
}

/* dgate of every assignment and the gated output gradient rows, in send order. */
static void pack_output_grads(moe_layer *ly, const float *dout, float *send) {
  int d = ly->c.dmodel, k = ly->c.topk;
  for (int t = 0; t < ly->rows; t++)
    for (int j = 0; j < k; j++) {
      long r = send_row(ly, t, j);
      ly->dgate[t * k + j] = 0.0f;
      if (r < 0) continue;
      const float *y = ly->back + (size_t)r * d, *g = dout + (size_t)t * d;
      float w = ly->gate[t * k + j], *dy = send + (size_t)r * d, dot = 0.0f;
      for (int i = 0; i < d; i++) {
        dot += g[i] * y[i];
        dy[i] = w * g[i];
      }
      ly->dgate[t * k + j] = dot;
    }
}

static void add_input_grads(const moe_layer *ly, const gpt_backend *be, float *dxln) {
  size_t d = (size_t)ly->c.dmodel;
  for (int t = 0; t < ly->rows; t++)
    for (int j = 0; j < ly->c.topk; j++) {
      long r = send_row(ly, t, j);
      if (r >= 0) be->add(dxln + (size_t)t * d, ly->back + (size_t)r * d, d);
    }
}

weft_status_t moe_layer_backward(moe_layer *ly, moe_scratch *s, moe_exchange *ex, const gpt_backend *be,
                                 const float *router_w, const float *experts, float *g_router,
                                 float *g_experts, const float *xln, const float *dout, float *dxln) {
  pack_output_grads(ly, dout, s->send);
  weft_status_t st = a2av_start(ex, "backward dispatch all-to-allv", s->send, ly->sc, ly->sd, s->recv, ly->rc,
                                ly->rd);
  if (st != WEFT_SUCCESS) return st;
  moe_router_backward(ly, be, router_w, g_router, xln, s->dlogits, dxln);
  if ((st = ex_wait(ex)) != WEFT_SUCCESS) return st;
  permute(ly, s->recv, s->dy, 1);
  size_t esz = moe_expert_size(&ly->c), d = (size_t)ly->c.dmodel, h = (size_t)ly->c.hidden;
  for (int j = 0; j < ly->nlocal; j++) {
    size_t lo = ly->mstart[j];
    int M = (int)(ly->mstart[j + 1] - lo);
    if (M > 0) expert_backward_data(ly, be, experts + j * esz, lo, M, s->dy + lo * d, s->da + lo * h, s->recv + lo * d);
  }
  permute(ly, s->recv, s->send, 0);
  st = a2av_start(ex, "backward combine all-to-allv", s->send, ly->rc, ly->rd, ly->back, ly->sc, ly->sd);
  if (st != WEFT_SUCCESS) return st;
  for (int j = 0; j < ly->nlocal; j++) {
    size_t lo = ly->mstart[j];
    int M = (int)(ly->mstart[j + 1] - lo);
    if (M > 0) expert_backward_weights(ly, be, g_experts + j * esz, lo, M, s->dy + lo * d, s->da + lo * h);
  }
  if ((st = ex_wait(ex)) != WEFT_SUCCESS) return st;
  add_input_grads(ly, be, dxln);
  return WEFT_SUCCESS;
}

/* trainers/moe_router.c: top-k routing with capacity, and the load-balancing loss.
 *
 * Forward, per token row t (rows split into ly->groups consecutive groups of n rows):
 *   1. logits = xln[t] Wr (one sgemm for all rows), p = softmax(logits), max-subtracted;
 *   2. the k largest p (ties go to the lower expert index): e1 (and e2);
 *      k = 1: gate = p_e1 (Switch Transformer, Fedus et al. 2021: not renormalised, so the
 *      router learns through the gate's size); k = 2: gates p_e1/(p_e1+p_e2), p_e2/(...)
 *      (GShard, Lepikhin et al. 2020, renormalised top-2);
 *   3. capacity C = ceil(capacity_factor * k * n / E) slots per (group, expert). Slots are
 *      handed out as GShard does: every token's first choice, in token order, then every
 *      second choice, so a second choice never displaces a first. A choice finding its
 *      expert full is dropped (slot -1): it contributes nothing, its gate still counts in
 *      the renormalisation;
 *   4. aux = alpha * E * sum_i f_i P_i per group (Switch eq. 4), f_i the fraction of first
 *      choices going to i, P_i the mean p_i; the layer's aux is the mean over local groups.
 *
 * Backward: dp_i = aux term alpha * E * f_i / (n * groups) on every token, plus the gates'
 * terms (k = 1: dp_e1 += dgate; k = 2: dp_ej += (dgate_j - sum_m dgate_m w_m) / (p_e1 +
 * p_e2)), then dlogits = p * (dp - sum p dp), dWr += xln^T dlogits, dxln = dlogits Wr^T.
 * The router's row softmax over E is a short C loop: backend.h has only the causal one.
 */
#include "trainers/moe_router.h"

#include <math.h>
#include <string.h>

static void softmax_rows(float *p, int rows, int E) {
  for (int t = 0; t < rows; t++) {
    float *r = p + (size_t)t * E, mx = r[0];
    for (int i = 1; i < E; i++)
      mx = fmaxf(mx, r[i]);
    double sum = 0.0;
    for (int i = 0; i < E; i++)
      sum += (r[i] = expf(r[i] - mx));
    for (int i = 0; i < E; i++)
      r[i] = (float)(r[i] / sum);
  }
}

/* Gates of the chosen experts. */
static void gates(const float *p, int k, const int *choice, float *gate) {
  if (k == 1) {
    gate[0] = p[choice[0]];
    return;
  }
  float s = p[choice[0]] + p[choice[1]];
  gate[0] = p[choice[0]] / s;
  gate[1] = p[choice[1]] / s;
}

/* The k best experts of one probability row; ties go to the lower index. */
static void top_k(const float *p, int E, int k, int *choice) {
  int e1 = 0, e2 = -1;
  for (int i = 1; i < E; i++)
    if (p[i] > p[e1]) e1 = i;
  choice[0] = e1;
  if (k == 1) return;
  for (int i = 0; i < E; i++)
    if (i != e1 && (e2 < 0 || p[i] > p[e2])) e2 = i;
  choice[1] = e2;
}

/* Slots of group g (rows [lo, lo + n)): first choices, then second choices. */
static void assign_slots(moe_layer *ly, int g, int lo, int n) {
  int E = ly->c.experts, k = ly->c.topk, *kept = ly->kept + (size_t)g * E;
  for (int j = 0; j < k; j++)
    for (int t = lo; t < lo + n; t++) {
      int e = ly->choice[t * k + j];
      ly->stat_routed[e]++;
      if (kept[e] >= ly->capacity) {
        ly->slot[t * k + j] = -1;
        continue;
      }
      ly->slot[t * k + j] = kept[e]++;
      ly->stat_kept[e]++;
    }
}

static void count_first(moe_layer *ly, int g, int lo, int n) {
  int *first = ly->first + (size_t)g * ly->c.experts;
  for (int t = lo; t < lo + n; t++)
    first[ly->choice[t * ly->c.topk]]++;
}

/* P_i of group g and its aux loss (f_i = first_i / n). */
static double group_aux(moe_layer *ly, int g, int lo, int n) {
  int E = ly->c.experts, *first = ly->first + (size_t)g * E;
  float *P = ly->pmean + (size_t)g * E;
  double psum[E];
  for (int i = 0; i < E; i++)
    psum[i] = 0.0;
  for (int t = lo; t < lo + n; t++)
    for (int i = 0; i < E; i++)
      psum[i] += ly->probs[(size_t)t * E + i];
  double aux = 0.0;
  for (int i = 0; i < E; i++) {
    P[i] = (float)(psum[i] / n);
    aux += (double)first[i] / n * P[i];
  }
  return ly->c.aux_alpha * E * aux;
}

/* Choices, slots and first-choice counts: what freeze_routing keeps. */
static void route(moe_layer *ly, int rows) {
  int E = ly->c.experts, k = ly->c.topk, G = ly->groups, n = rows / G;
  for (int t = 0; t < rows; t++)
    top_k(ly->probs + (size_t)t * E, E, k, ly->choice + t * k);
  memset(ly->kept, 0, (size_t)G * E * sizeof(int));
  memset(ly->first, 0, (size_t)G * E * sizeof(int));
  for (int g = 0; g < G; g++) {
    assign_slots(ly, g, g * n, n);
    count_first(ly, g, g * n, n);
  }
}

void moe_router_forward(moe_layer *ly, const gpt_backend *be, const float *router_w, const float *xln,
                        int rows) {
  int E = ly->c.experts, k = ly->c.topk, d = ly->c.dmodel, G = ly->groups, n = rows / G;
  int frozen = ly->freeze_routing && ly->rows == rows;
  ly->rows = rows;
  ly->capacity = (int)ceil((double)ly->c.capacity_factor * k * n / E);
  if (ly->capacity < 1) ly->capacity = 1;
  be->gemm(false, false, rows, E, d, 1.0f, xln, d, router_w, E, 0.0f, ly->probs, E);
  softmax_rows(ly->probs, rows, E);
  if (!frozen) route(ly, rows);
  for (int t = 0; t < rows; t++)
    gates(ly->probs + (size_t)t * E, k, ly->choice + t * k, ly->gate + t * k);
  ly->aux = 0.0;
  for (int g = 0; g < G; g++)
    ly->aux += group_aux(ly, g, g * n, n) / G;
}

/* d loss / d p of one token row: the aux term plus the gates'. */
static void token_dp(const moe_layer *ly, int t, int g, int n, float *dp) {
  int E = ly->c.experts, k = ly->c.topk;
  const int *first = ly->first + (size_t)g * E, *ch = ly->choice + t * k;
  const float *p = ly->probs + (size_t)t * E, *dg = ly->dgate + t * k, *w = ly->gate + t * k;
  double aux_scale = (double)ly->c.aux_alpha * E / ((double)n * n * ly->groups);
  for (int i = 0; i < E; i++)
    dp[i] = (float)(aux_scale * first[i]); /* f_i / n = first_i / n^2 */
  if (k == 1) {
    dp[ch[0]] += dg[0];
    return;
  }
  float s = p[ch[0]] + p[ch[1]], c = dg[0] * w[0] + dg[1] * w[1];
  dp[ch[0]] += (dg[0] - c) / s;
  dp[ch[1]] += (dg[1] - c) / s;
}

void moe_router_backward(moe_layer *ly, const gpt_backend *be, const float *router_w, float *g_router,
                         const float *xln, float *dlogits, float *dxln) {
  int E = ly->c.experts, d = ly->c.dmodel, rows = ly->rows, n = rows / ly->groups;
  float dp[E];
  for (int t = 0; t < rows; t++) {
    token_dp(ly, t, t / n, n, dp);
    const float *p = ly->probs + (size_t)t * E;
    float *dl = dlogits + (size_t)t * E, dot = 0.0f;
    for (int i = 0; i < E; i++)
      dot += p[i] * dp[i];
    for (int i = 0; i < E; i++)
      dl[i] = p[i] * (dp[i] - dot);
  }
  be->gemm(true, false, d, E, rows, 1.0f, xln, d, dlogits, E, 1.0f, g_router, E);
  be->gemm(false, true, rows, d, E, 1.0f, dlogits, E, router_w, E, 0.0f, dxln, d);
}

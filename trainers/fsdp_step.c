/* trainers/fsdp_step.c: just-in-time all-gathers, per-unit reduce-scatters and the buffer
 * pool of weft-train-fsdp; see fsdp_step.h for the schedule. */
#include "trainers/fsdp_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank_of(const fsdp_engine *e) {
  return e->plan.rank;
}

static int fail(fsdp_engine *e, const char *what, int unit, weft_status_t st) {
  snprintf(e->err, sizeof(e->err), "rank %d: %s of unit %d: %s: %s", rank_of(e), what, unit,
           weft_get_error_string(st), weft_get_last_error(e->comm));
  return -1;
}

static int alloc_buffers(fsdp_engine *e, size_t root_floats) {
  size_t n = fsdp_local_total(&e->plan);
  int ok = 1;
#define ALLOC(p, k) ((p) = calloc((k), sizeof(float)), ok &= (p) != NULL)
  ALLOC(e->params, n);
  ALLOC(e->grads, n);
  ALLOC(e->adam_m, n);
  ALLOC(e->adam_v, n);
  ALLOC(e->root_p, root_floats);
  ALLOC(e->root_g, root_floats);
  for (int i = 0; i < 2; i++) {
    ALLOC(e->pbuf[i], e->pool_floats);
    ALLOC(e->gbuf[i], e->pool_floats);
    ALLOC(e->rs_tmp[i], e->max_shard);
  }
#undef ALLOC
  return ok ? 0 : -1;
}

int fsdp_engine_init(fsdp_engine *e, gpt_model *m, const float *adam_m, const float *adam_v,
                     weft_comm_t comm, int no_overlap, char *err, size_t errlen) {
  memset(e, 0, sizeof(*e));
  e->m = m;
  e->comm = comm;
  e->no_overlap = no_overlap;
  int nranks = 1, rank = 0;
  weft_comm_count(comm, &nranks);
  weft_comm_user_rank(comm, &rank);
  if (fsdp_plan_init(&e->plan, &m->lay, nranks, rank)) goto oom;
  for (int u = 0; u < e->plan.nunits; u++) {
    if (u > 0 && fsdp_padded(&e->plan, u) > e->pool_floats) e->pool_floats = fsdp_padded(&e->plan, u);
    if (e->plan.shard[u] > e->max_shard) e->max_shard = e->plan.shard[u];
  }
  if (alloc_buffers(e, fsdp_padded(&e->plan, 0))) goto oom;
  fsdp_shard_copy_in(&e->plan, &m->lay, m->params, e->params);
  if (adam_m) fsdp_shard_copy_in(&e->plan, &m->lay, adam_m, e->adam_m);
  if (adam_v) fsdp_shard_copy_in(&e->plan, &m->lay, adam_v, e->adam_v);
  return gpt_comm_stream_init(&e->st, err, errlen);
oom:
  snprintf(err, errlen, "rank %d: out of memory for the shards and gather buffers", rank);
  return -1;
}

void fsdp_engine_free(fsdp_engine *e) {
  if (e->st.stream) gpt_comm_stream_free(&e->st);
  float *bufs[] = {e->params, e->grads,   e->adam_m,  e->adam_v,  e->root_p,    e->root_g,
                   e->pbuf[0], e->pbuf[1], e->gbuf[0], e->gbuf[1], e->rs_tmp[0], e->rs_tmp[1]};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
  fsdp_plan_free(&e->plan);
  memset(e, 0, sizeof(*e));
}

size_t fsdp_sharded_bytes(const fsdp_engine *e) {
  return 4 * fsdp_local_total(&e->plan) * sizeof(float);
}

size_t fsdp_gathered_bytes(const fsdp_engine *e) {
  return (2 * fsdp_padded(&e->plan, 0) + 4 * e->pool_floats + 2 * e->max_shard) * sizeof(float);
}

void fsdp_zero_grad(fsdp_engine *e) {
  memset(e->grads, 0, fsdp_local_total(&e->plan) * sizeof(float));
}

/* A collective was enqueued (or failed to be); with --no-overlap, wait for it at once. */
static int posted(fsdp_engine *e, const char *what, int unit, weft_status_t st) {
  if (st != WEFT_SUCCESS) return fail(e, what, unit, st);
  gpt_comm_stream_enqueued(&e->st);
  if (!e->no_overlap) return 0;
  st = gpt_comm_stream_wait(&e->st);
  return st == WEFT_SUCCESS ? 0 : fail(e, what, unit, st);
}

static int gather(fsdp_engine *e, int u, float *dst) {
  gpt_comm_stream_begin_op(&e->st);
  weft_status_t st = weft_all_gather(e->params + e->plan.local_off[u], dst, e->plan.shard[u], WEFT_FLOAT32,
                                     e->comm, e->st.stream);
  return posted(e, "all-gather of the parameters", u, st);
}

static int reduce_scatter(fsdp_engine *e, int u, const float *g, float *dst) {
  gpt_comm_stream_begin_op(&e->st);
  weft_status_t st = weft_reduce_scatter(g, dst, e->plan.shard[u], WEFT_FLOAT32, WEFT_AVG, e->comm,
                                         e->st.stream);
  return posted(e, "reduce-scatter of the gradients", u, st);
}

/* Waits for the stream; what names the stage that needed it. */
static int wait_stream(fsdp_engine *e, const char *what, int unit) {
  weft_status_t st = gpt_comm_stream_wait(&e->st);
  return st == WEFT_SUCCESS ? 0 : fail(e, what, unit, st);
}

static void forward_unit(fsdp_engine *e, int u, const float *p, const int *tokens, const int *targets, int B,
                         int T) {
  gpt_model *m = e->m;
  int L = m->cfg.layers;
  if (u == 0)
    gpt_embed_forward(m, p, tokens, m->res[0], B, T);
  else if (u <= L)
    gpt_block_forward(m, u - 1, p, m->res[u - 1], m->res[u], B, T);
  else
    gpt_head_forward(m, p, e->root_p, m->res[L], targets, B, T);
}

int fsdp_forward(fsdp_engine *e, const int *tokens, const int *targets, int B, int T) {
  int n = e->m->cfg.layers + 2;
  if (gather(e, 0, e->root_p) || wait_stream(e, "waiting for the all-gather", 0)) return -1;
  for (int u = 0; u < n; u++) {
    if (u + 1 < n && gather(e, u + 1, e->pbuf[(u + 1) % 2])) return -1;
    forward_unit(e, u, u == 0 ? e->root_p : e->pbuf[u % 2], tokens, targets, B, T);
    if (wait_stream(e, "forward: waiting for the all-gather", u + 1 < n ? u + 1 : u)) return -1;
  }
  return 0;
}

static void backward_unit(fsdp_engine *e, int u, const float *p, float *g, const int *tokens, int B, int T) {
  gpt_model *m = e->m;
  int L = m->cfg.layers;
  float *dx = m->dres[0];
  if (u == L + 1)
    gpt_head_backward(m, p, e->root_p, g, e->root_g, dx, B, T);
  else if (u >= 1)
    gpt_block_backward(m, u - 1, p, g, dx, dx, B, T);
  else
    gpt_embed_backward(m, e->root_g, tokens, dx, B, T);
}

/* The reduce-scatter of unit u landed in tmp: add it to the accumulated shard. */
static void add_shard(fsdp_engine *e, int u, const float *tmp) {
  float *g = e->grads + e->plan.local_off[u];
  for (size_t i = 0; i < e->plan.shard[u]; i++) g[i] += tmp[i];
}

/* Stage i works on unit L+1-i with pool slot i % 2; unit 0 (the last stage) needs no
 * gather (the embedding's backward reads no parameter) and uses the root's buffers. */
int fsdp_backward(fsdp_engine *e, const int *tokens, int B, int T) {
  int L = e->m->cfg.layers, n = L + 2;
  memset(e->root_g, 0, fsdp_padded(&e->plan, 0) * sizeof(float));
  if (gather(e, L + 1, e->pbuf[0]) || wait_stream(e, "backward: waiting for the all-gather", L + 1)) return -1;
  for (int i = 0; i < n; i++) {
    int u = L + 1 - i;
    if (u - 1 >= 1 && gather(e, u - 1, e->pbuf[(i + 1) % 2])) return -1;
    float *g = u == 0 ? e->root_g : e->gbuf[i % 2];
    if (u != 0) memset(g, 0, fsdp_padded(&e->plan, u) * sizeof(float));
    backward_unit(e, u, e->pbuf[i % 2], g, tokens, B, T);
    if (wait_stream(e, "backward: waiting for the all-gather and reduce-scatter", u)) return -1;
    if (i > 0) add_shard(e, u + 1, e->rs_tmp[(i - 1) % 2]);
    if (reduce_scatter(e, u, g, e->rs_tmp[i % 2])) return -1;
  }
  if (wait_stream(e, "waiting for the last reduce-scatter", 0)) return -1;
  add_shard(e, 0, e->rs_tmp[(n - 1) % 2]);
  return 0;
}

int fsdp_gather_full(fsdp_engine *e, const float *local, float *full) {
  const gpt_layout *lay = &e->m->lay;
  float *tmp = e->plan.rank == 0 ? e->pbuf[0] : NULL;
  for (int u = 0; u < e->plan.nunits; u++) {
    /* Unit 0 may be larger than the pool: gather it into the root buffer. */
    float *dst = e->plan.rank == 0 && u == 0 ? e->root_p : tmp;
    weft_status_t st =
        weft_gather(local + e->plan.local_off[u], dst, e->plan.shard[u], WEFT_FLOAT32, 0, e->comm, NULL);
    if (st != WEFT_SUCCESS) return fail(e, "gather to rank 0 for the checkpoint", u, st);
    if (full) memcpy(full + lay->unit_offset[u], dst, (lay->unit_offset[u + 1] - lay->unit_offset[u]) * 4);
  }
  return 0;
}

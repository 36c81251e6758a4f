/* trainers/ddp_elastic.c: surviving a lost rank in weft-train-ddp; see ddp_elastic.h. */
#include "trainers/ddp_elastic.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <weft.h>

int gpt_elastic_check(gpt_elastic *e, int max_batch, char *err, size_t errlen) {
  e->max_batch = max_batch;
  if (e->batch == NULL) e->batch = "per-rank";
  if (strcmp(e->batch, "per-rank") != 0 && strcmp(e->batch, "global") != 0) {
    snprintf(err, errlen, "--elastic-batch must be per-rank or global, got \"%s\"", e->batch);
    return -1;
  }
  return 0;
}

/* Which old ranks are gone: every survivor says its old rank (all-gather on the new comm). */
static int lost_ranks(gpt_dist *d, int old_rank, int old_n, char *text, size_t len) {
  int32_t mine = old_rank, *all = malloc(sizeof(int32_t) * (size_t)d->nranks);
  char *alive = calloc((size_t)old_n, 1);
  weft_status_t st = all == NULL || alive == NULL ? WEFT_ERR_NO_MEMORY
                                                  : weft_all_gather(&mine, all, 1, WEFT_INT32, d->comm, NULL);
  size_t n = 0;
  int count = 0;
  text[0] = '\0';
  if (st == WEFT_SUCCESS) {
    for (int i = 0; i < d->nranks; i++)
      if (all[i] >= 0 && all[i] < old_n) alive[all[i]] = 1;
    for (int p = 0; p < old_n && n < len; p++)
      if (!alive[p]) n += (size_t)snprintf(text + n, len - n, "%s%d", count++ ? ", " : "", p);
  }
  free(all);
  free(alive);
  return st == WEFT_SUCCESS ? count : -1;
}

/* Every survivor takes the new rank 0's state (see ddp_elastic.h for why). */
static weft_status_t take_rank0_state(gpt_dp *dp) {
  gpt_run *r = &dp->base;
  size_t n = r->m->lay.total;
  float *bufs[3] = {r->m->params, r->st.adam_m, r->st.adam_v};
  weft_status_t st = WEFT_SUCCESS;
  for (int i = 0; i < 3 && st == WEFT_SUCCESS; i++)
    st = weft_broadcast(bufs[i], bufs[i], n, WEFT_FLOAT32, 0, dp->dist.comm, NULL);
  struct {
    int64_t step;
    gpt_rng rng;
  } small = {r->st.step, r->st.rng};
  if (st == WEFT_SUCCESS) st = weft_broadcast(&small, &small, sizeof(small), WEFT_UINT8, 0, dp->dist.comm, NULL);
  r->st.step = (long)small.step;
  r->st.rng = small.rng;
  return st;
}

/* The batch on the new rank count; describes the change in what. */
static void adjust_batch(gpt_elastic *e, gpt_dp *dp, int *accum, char *what, size_t len) {
  int N = dp->dist.nranks, G = dp->G, b = dp->base.o.batch, K = *accum;
  if (strcmp(e->batch, "global") == 0) {
    int share = G / N; /* sequences per rank; >= 1 since G >= old N > N */
    if (share < 1) share = 1;
    K = (share + e->max_batch - 1) / e->max_batch;
    while (share % K != 0) K++; /* ends at K = share at worst (micro-batch 1) */
    b = share / K;
  }
  int G2 = N * K * b;
  snprintf(what, len, "global batch %d -> %d sequences%s: %d per rank x accum %d", G, G2,
           strcmp(e->batch, "global") == 0 && G2 != G ? " (not divisible)" : "", b, K);
  dp->base.o.batch = b;
  dp->accum = *accum = K;
  dp->G = G2;
}

int gpt_elastic_recover(gpt_elastic *e, gpt_dp *dp, int *accum, const char *during, char *err, size_t errlen) {
  gpt_dist *d = &dp->dist;
  double t0 = gpt_now_s();
  int old_rank = d->rank, old_n = d->nranks;
  long failed_step = during ? dp->base.st.step : dp->base.st.step + 1;
  weft_comm_t next = NULL;
  weft_status_t st = weft_comm_shrink(d->comm, NULL, WEFT_SHRINK_FAILED, &next, NULL);
  if (st != WEFT_SUCCESS) {
    snprintf(err, errlen, "elastic: shrinking to the surviving ranks failed: %s: %s", weft_get_error_string(st),
             weft_get_last_error(d->comm));
    return -1;
  }
  weft_comm_abort(d->comm); /* revoked and shrunk: its windows and connections go too */
  d->comm = next;
  weft_comm_user_rank(next, &d->rank);
  weft_comm_count(next, &d->nranks);
  char lost[256], batch[160];
  int nlost = lost_ranks(d, old_rank, old_n, lost, sizeof(lost));
  if (nlost < 0 || take_rank0_state(dp) != WEFT_SUCCESS) {
    snprintf(err, errlen, "elastic: after the shrink to %d ranks: %s", d->nranks, weft_get_last_error(next));
    return -1;
  }
  e->lost += nlost;
  adjust_batch(e, dp, accum, batch, sizeof(batch));
  dp->rep.rank = d->rank;
  dp->rep.nranks = d->nranks;
  dp->rep.tokens_per_step = (double)dp->G * dp->base.m->cfg.seq;
  e->first_step_pending_s = gpt_now_s();
  if (d->rank == 0) {
    printf("# rank%s %s lost at step %ld%s%s; continuing on %d ranks (%s; shrink and state %.0f ms)\n",
           nlost > 1 ? "s" : "", lost, failed_step, during ? ", in " : "", during ? during : "", d->nranks, batch,
           (e->first_step_pending_s - t0) * 1e3);
    fflush(stdout);
  }
  return 0;
}

void gpt_elastic_step_done(gpt_elastic *e, const gpt_dp *dp) {
  if (e->first_step_pending_s == 0) return;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  if (dp->dist.rank == 0) {
    printf("# elastic: first step on %d ranks done %.0f ms after the recovery; at unix time %.3f\n",
           dp->dist.nranks, (gpt_now_s() - e->first_step_pending_s) * 1e3, now.tv_sec + now.tv_nsec * 1e-9);
    fflush(stdout);
  }
  e->first_step_pending_s = 0;
}

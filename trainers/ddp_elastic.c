/* trainers/ddp_elastic.c: surviving a lost rank in weft-train-ddp; see ddp_elastic.h. */
#include "trainers/ddp_elastic.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <weft.h>

int gpt_elastic_check(gpt_elastic *e, int max_batch, char *err, size_t errlen) {
  e->max_batch = max_batch;
  if (e->batch == NULL) e->batch = "per-rank";
  if (strcmp(e->batch, "per-rank") != 0 && strcmp(e->batch, "global") != 0) {
    snprintf(err, errlen, "--elastic-batch must be per-rank or global, got \"%s\"", e->batch);
    return -1;
  }
  const char *fault = getenv("WEFT_TRAIN_FAULT");
  if (fault && fault[0] &&
      (sscanf(fault, "%15[a-z]:%ld:%d:%d", e->fault.phase, &e->fault.step, &e->fault.victim, &e->fault.laggard) != 4 ||
       (strcmp(e->fault.phase, "validation") != 0 && strcmp(e->fault.phase, "statistics") != 0 &&
        strcmp(e->fault.phase, "update") != 0))) {
    snprintf(err, errlen, "WEFT_TRAIN_FAULT must be validation|statistics|update:STEP:VICTIM:LAGGARD, got \"%s\"",
             fault);
    return -1;
  }
  return 0;
}

/* 1 once process pid has ended (gone, or a zombie its parent has not reaped yet). */
static int process_ended(int64_t pid) {
  char path[64], state = 0;
  snprintf(path, sizeof(path), "/proc/%lld/stat", (long long)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 1;
  int got = fscanf(f, "%*d (%*[^)]) %c", &state);
  fclose(f);
  return got == 1 && (state == 'Z' || state == 'X');
}

int gpt_elastic_fault(gpt_elastic *e, const gpt_dp *dp, const char *phase) {
  if (!e->on || !e->fault.phase[0] || e->lost || strcmp(phase, e->fault.phase) != 0 ||
      dp->base.st.step != e->fault.step)
    return 0;
  e->fault.phase[0] = '\0';
  /* Every rank has finished the phase once this all-gather ends; then the victim dies, and
   * the laggard fails only when it is dead, so that the shrink counts it out. */
  int64_t mine = getpid(), *pids = calloc((size_t)dp->dist.nranks, sizeof(int64_t));
  if (pids == NULL || weft_all_gather(&mine, pids, 1, WEFT_INT64, dp->dist.comm, NULL) != WEFT_SUCCESS) {
    free(pids);
    return 1;
  }
  if (dp->dist.rank == e->fault.victim) raise(SIGKILL);
  int laggard = dp->dist.rank == e->fault.laggard;
  double give_up = gpt_now_s() + 30;
  while (laggard && e->fault.victim < dp->dist.nranks && !process_ended(pids[e->fault.victim]) &&
         gpt_now_s() < give_up) {
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
  }
  /* The others left the all-gather by now, almost surely: they had every part of it. */
  struct timespec settle = {0, 20000000};
  if (laggard) nanosleep(&settle, NULL);
  free(pids);
  return laggard;
}

/* Which old ranks are gone, and the furthest position: every survivor says its old rank and
 * its position (one all-gather on the new comm). */
static int lost_ranks(gpt_dist *d, int old_rank, int old_n, long *at, char *text, size_t len) {
  int64_t mine[2] = {old_rank, *at}, *all = malloc(sizeof(int64_t) * 2 * (size_t)d->nranks);
  char *alive = calloc((size_t)old_n, 1);
  weft_status_t st = all == NULL || alive == NULL ? WEFT_ERR_NO_MEMORY
                                                  : weft_all_gather(mine, all, 2, WEFT_INT64, d->comm, NULL);
  size_t n = 0;
  int count = 0;
  text[0] = '\0';
  if (st == WEFT_SUCCESS) {
    for (int i = 0; i < d->nranks; i++) {
      if (all[2 * i] >= 0 && all[2 * i] < old_n) alive[all[2 * i]] = 1;
      if (all[2 * i + 1] > *at) *at = (long)all[2 * i + 1];
    }
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

int gpt_elastic_recover(gpt_elastic *e, gpt_dp *dp, int *accum, const char *during, long *at, char *err,
                        size_t errlen) {
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
  long mine = *at;
  int nlost = lost_ranks(d, old_rank, old_n, at, lost, sizeof(lost));
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
    if (nlost > 0)
      printf("# rank%s %s lost at step %ld%s%s; continuing on %d ranks (%s; shrink and state %.0f ms)\n",
             nlost > 1 ? "s" : "", lost, failed_step, during ? ", in " : "", during ? during : "", d->nranks, batch,
             (e->first_step_pending_s - t0) * 1e3);
    else
      printf("# a call failed at step %ld%s%s with no rank lost; continuing on %d ranks\n", failed_step,
             during ? ", in " : "", during ? during : "", d->nranks);
    if (*at > mine)
      printf("# rank 0 was behind the others: its %s %s done, they finished it\n", during ? during : "step",
             during ? "is" : "counts as");
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

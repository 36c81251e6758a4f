/* trainers/dist_comm.c: joining the job, failure messages, small reductions and the peak
 * measurement of the distributed trainers; see dist_comm.h. */
#include "trainers/dist_comm.h"

#include <stdio.h>

int gpt_dist_join(gpt_dist *d, const char *prog, const char *launch, char *err, size_t errlen) {
  d->prog = prog;
  weft_status_t st = weft_comm_init_from_env(&d->comm, NULL);
  if (st != WEFT_SUCCESS) {
    snprintf(err, errlen, "cannot join the job: %s (launch with weftrun -n %s, mpirun or srun)",
             weft_get_last_error(NULL), launch);
    d->comm = NULL;
    return -1;
  }
  weft_comm_user_rank(d->comm, &d->rank);
  weft_comm_count(d->comm, &d->nranks);
  return 0;
}

int gpt_dist_fail(const gpt_dist *d, const char *what, weft_status_t st) {
  fprintf(stderr, "%s: rank %d: %s: %s: %s\n", d->prog, d->rank, what, weft_get_error_string(st),
          weft_get_last_error(d->comm));
  return -1;
}

int gpt_dist_reduce(const gpt_dist *d, void *v, size_t n, weft_datatype_t type, weft_redop_t op,
                    const char *what) {
  weft_status_t st = weft_all_reduce(v, v, n, type, op, d->comm, NULL);
  return st == WEFT_SUCCESS ? 0 : gpt_dist_fail(d, what, st);
}

int gpt_dist_average(const gpt_dist *d, double *v, size_t n, const char *what) {
  return gpt_dist_reduce(d, v, n, WEFT_FLOAT64, WEFT_AVG, what);
}

int gpt_dist_measure_peak(const gpt_dist *d, float given, gpt_peak *p) {
  if (given > 0) {
    gpt_peak_given(given, p);
    return 0;
  }
  weft_status_t st = weft_barrier(d->comm, NULL);
  if (st != WEFT_SUCCESS) return gpt_dist_fail(d, "barrier before the peak measurement", st);
  gpt_measure_peak(p);
  /* The highest rank's figure, not the mean: every rank runs on the same kind of core, and
   * a rank whose whole measurement shared its core with another (seen here: one launch's
   * mean came out half the peak, and its MFU 137%) only measured the disturbance. */
  double v[2] = {p->fma_gflops, p->sgemm_gflops};
  if (gpt_dist_reduce(d, v, 2, WEFT_FLOAT64, WEFT_MAX, "peak FLOP/s")) return -1;
  p->fma_gflops = v[0];
  p->sgemm_gflops = v[1];
  return 0;
}

/* A failed checkpoint collective, as gpt_dist_fail says it, into err. */
static int ckpt_fail(const gpt_dist *d, const char *what, weft_status_t st, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: %s: %s", what, weft_get_error_string(st), weft_get_last_error(d->comm));
  return -1;
}

static int ckpt_bcast(void *ctx, void *buf, size_t bytes, char *err, size_t errlen) {
  const gpt_dist *d = ctx;
  weft_status_t st = weft_broadcast(buf, buf, bytes, WEFT_UINT8, 0, d->comm, NULL);
  return st == WEFT_SUCCESS ? 0 : ckpt_fail(d, "checkpoint broadcast", st, err, errlen);
}

static int ckpt_gather(void *ctx, const void *mine, void *all, size_t bytes, char *err, size_t errlen) {
  const gpt_dist *d = ctx;
  weft_status_t st = weft_gather(mine, all, bytes, WEFT_UINT8, 0, d->comm, NULL);
  return st == WEFT_SUCCESS ? 0 : ckpt_fail(d, "checkpoint gather of the shard reports", st, err, errlen);
}

gpt_ckpt_group gpt_dist_ckpt_group(const gpt_dist *d) {
  return (gpt_ckpt_group){.rank = d->rank, .nranks = d->nranks, .ctx = (void *)d, .bcast = ckpt_bcast,
                          .gather = ckpt_gather};
}

int gpt_dist_ckpt_save(const gpt_dist *d, gpt_ckpt_track *t, const gpt_ckpt_save_req *r, char *err, size_t errlen) {
  gpt_ckpt_group g = gpt_dist_ckpt_group(d);
  gpt_ckpt_saved saved;
  if (gpt_ckpt_save(&g, r, &saved, err, errlen)) {
    gpt_ckpt_failed_note(t, &saved, r->step);
    return -1;
  }
  gpt_ckpt_saved_note(t, &saved, r->step, d->rank);
  return 0;
}

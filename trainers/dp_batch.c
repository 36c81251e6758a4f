/* trainers/dp_batch.c: the data-parallel trainers' global batch; see dp_batch.h. */
#include "trainers/dp_batch.h"

#include <stdio.h>
#include <stdlib.h>

int gpt_dp_init(gpt_dp *d, const char *prog, const gpt_trainer_flags *f, int accum, char *err, size_t errlen) {
  if (gpt_dist_join(&d->dist, prog, "N", err, errlen)) return -1;
  gpt_run_opts o = f->run;
  int is_file; /* gpt_run_init tells the two forms apart again */
  gpt_ckpt_group g = gpt_dist_ckpt_group(&d->dist);
  if (o.resume && gpt_ckpt_resolve_group(&g, o.resume, d->resume, sizeof(d->resume), &is_file, err, errlen)) return -1;
  if (o.resume) o.resume = d->resume;
  if (gpt_run_init(&d->base, &o, err, errlen)) return -1;
  gpt_ckpt_track_init(&d->ckpt, f->ckpt_dir, f->save_every, f->keep, &d->base.from, &d->base.st.step, f->steps);
  const gpt_config *c = &d->base.m->cfg;
  d->accum = accum;
  d->G = d->dist.nranks * accum * d->base.o.batch;
  size_t n = (size_t)d->G * c->seq;
  d->gx = malloc(n * sizeof(int));
  d->gy = malloc(n * sizeof(int));
  if (!d->gx || !d->gy) {
    snprintf(err, errlen, "out of memory for the global batch");
    return -1;
  }
  d->rep.rank = d->dist.rank;
  d->rep.nranks = d->dist.nranks;
  d->rep.flops_per_token = gpt_flops_per_token(c);
  d->rep.tokens_per_step = (double)d->G * c->seq;
  return 0;
}

int gpt_dp_measure_peak(gpt_dp *d, float given, char *err, size_t errlen) {
  if (gpt_dist_measure_peak(&d->dist, given, &d->rep.peak) == 0) return 0;
  snprintf(err, errlen, "peak measurement failed");
  return -1;
}

void gpt_dp_free(gpt_dp *d) {
  gpt_report_free(&d->rep);
  gpt_run_free(&d->base);
  free(d->gx);
  free(d->gy);
  if (d->dist.comm) weft_comm_destroy(d->dist.comm);
}

void gpt_dp_draw(gpt_dp *d) {
  gpt_run *r = &d->base;
  gpt_batch_random(r->ds.train, r->ds.ntrain, d->G, r->m->cfg.seq, &r->st.rng, d->gx, d->gy);
}

size_t gpt_dp_slice(const gpt_dp *d, int k) {
  return (size_t)((d->dist.rank * d->accum + k) * d->base.o.batch) * d->base.m->cfg.seq;
}

int gpt_dp_eval(gpt_dp *d, gpt_dp_loss_fn loss, void *ctx, double *val) {
  gpt_run *r = &d->base;
  int b = r->o.batch, T = r->m->cfg.seq, K = d->accum, E = r->o.eval_batches;
  double sum = 0.0, l;
  for (int i = 0; i < E; i++)
    for (int k = 0; k < K; k++) {
      size_t first = (size_t)i * d->G + (size_t)(d->dist.rank * K + k) * b;
      gpt_batch_fixed(r->ds.val, r->ds.nval, b, T, first, r->x, r->y);
      if (loss(ctx, r->x, r->y, b, T, &l)) return -1;
      sum += l;
    }
  *val = sum / (E * K > 0 ? E * K : 1);
  return gpt_dist_average(&d->dist, val, 1, "validation loss");
}

void gpt_dp_print_batch(const gpt_dp *d) {
  int T = d->base.m->cfg.seq;
  printf("# batch %d per rank x accum %d x %d ranks = %d sequences (%d tokens) per step\n", d->base.o.batch,
         d->accum, d->dist.nranks, d->G, d->G * T);
  gpt_ckpt_print_origin(&d->base.from, d->G, 0);
}

int gpt_dp_save(gpt_dp *d, const char *prog, const gpt_ckpt_local *own, char *err, size_t errlen) {
  gpt_ckpt_seg whole;
  gpt_ckpt_save_req r = gpt_run_save_req(&d->base, prog, d->ckpt.root, d->ckpt.keep, d->G, &whole);
  r.own = *own;
  return gpt_dist_ckpt_save(&d->dist, &d->ckpt, &r, err, errlen);
}

void gpt_dp_plot(gpt_dp *d, const char *prog, const gpt_trainer_flags *f) {
  char title[128];
  snprintf(title, sizeof(title), "%s, %d ranks, %d tokens/step", prog, d->dist.nranks, d->G * d->base.m->cfg.seq);
  gpt_report_plot(&d->rep, f->log, f->plot, title);
}

/* trainers/pipeline.c: weft-train-pipeline, pipeline-parallel training of the reference
 * GPT (weft issue 6).
 *
 *   ./weftrun -n 2 ./weft-train-pipeline --data ../shared/data/tinyshakespeare.txt --layers 4 \
 *       --dmodel 256 --heads 4 --seq 128 --batch 8 --microbatches 8 --schedule 1f1b --steps 30
 *
 * Rank s is pipeline stage s of P = the communicator's size: the L blocks split over the
 * stages (uneven splits allowed), stage 0 also holds the embeddings, stage P - 1 the final
 * LayerNorm and the head tied to wte (pipeline_stage.h). Each step runs M = --microbatches
 * microbatches of --batch sequences in GPipe or 1F1B order (pipeline_schedule.h),
 * activations and their gradients moving between neighbours with weft_send / weft_recv,
 * then the first and last stage sum their wte gradients, the stages all-reduce the
 * gradients' sum of squares for the global clipping norm, and each runs AdamW on its part.
 *
 * Data: one global batch of G = M * batch windows per step, drawn from the batch RNG every
 * rank seeds alike (weft-train's), microbatch k = windows [k * batch, + batch). So P
 * stages train on exactly what `weft-train --batch G` trains on, and reach the same losses
 * and parameters up to fp32 rounding (trainers/test_pipeline.c checks it).
 *
 * Output (rank 0): one line per step (loss from the last stage, gradient norm, ms,
 * tokens/s, MFU with the bubbles counted as lost time, time in communication, peak memory
 * of the largest stage, measured bubble beside (P-1)/(M+P-1)), a summary, a CSV log (--log)
 * and a PNG of the losses (--plot).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft.h>

#include "trainers/blas_core.h"
#include "trainers/pipeline.h"
#include "trainers/trainer_main.h"

#define PROG "weft-train-pipeline"

static void usage(FILE *f) {
  fprintf(f,
          "usage: weftrun -n P weft-train-pipeline --data PATH [options]\n"
          "  --data PATH          training text (e.g. ../shared/data/tinyshakespeare.txt)\n"
          "  --steps N            optimizer steps (default 100)\n"
          "  --layers L --dmodel D --heads H --seq T   model (4 128 4 64); L >= P\n"
          "  --batch B            sequences per microbatch (16)\n"
          "  --microbatches M     microbatches per step (4); global batch M*B\n"
          "  --schedule S         gpipe or 1f1b (1f1b)\n"
          "  --stages P           check that the launch has P ranks (default: any)\n"
          "  --lr X --wd X --clip X --seed N   as weft-train (3e-4 0.1 1.0 1)\n"
          "  --eval-every K       validation loss every K steps, 0 = only at the end (0)\n"
          "  --eval-batches N     validation batches (of M*B sequences) per evaluation (8)\n"
          "  --peak-gflops X      per-rank peak for MFU; 0 = measure at start-up (0)\n"
          "  --log CSV            per-step log (weft-train-pipeline.csv; \"none\" = no log)\n"
          "  --plot PNG           loss plot (weft-train-pipeline.png; \"none\" = no plot)\n"
          "  --save CKPT          rank 0 gathers the stages and writes a single-file weft-train checkpoint\n");
  gpt_trainer_ckpt_usage(f, 20);
}

static int parse(int argc, char **argv, pp_flags *f) {
  const gpt_flag own[] = {
      {"schedule", GPT_FLAG_STR, &f->schedule, 0, 0},
      {"microbatches", GPT_FLAG_INT, &f->M, 1, 65536},
      {"stages", GPT_FLAG_INT, &f->stages, 1, 4096},
  };
  if (gpt_trainer_parse(PROG, argc, argv, &f->c, GPT_FLAGS_CHECKPOINT | GPT_FLAGS_SAVE | GPT_FLAGS_LOG, own,
                        (int)(sizeof(own) / sizeof(own[0])), usage))
    return -1;
  if (!pp_schedule_parse(f->schedule, &f->sched)) return 0;
  fprintf(stderr, PROG ": --schedule must be gpipe or 1f1b\n");
  usage(stderr);
  return -1;
}

/* A sum over ranks of n doubles, in place (blocking). */
static int all_reduce_sum(pp_trainer *t, double *v, size_t n, const char *what) {
  return gpt_dist_reduce(&t->dist, v, n, WEFT_FLOAT64, WEFT_SUM, what);
}

/* The step's statistics, every stage filling its own entries of a zeroed vector
 * [loss, gnorm, wait[P], time[P], mib[P]], summed over ranks (exact: one writer each). */
static int gather_stats(pp_trainer *t, double loss, double gnorm, double dt, pp_step *s) {
  int P = t->dist.nranks;
  double *v = t->statv;
  memset(v, 0, (2 + 3 * (size_t)P) * sizeof(double));
  if (t->dist.rank == P - 1) v[0] = loss;
  if (t->dist.rank == 0) v[1] = gnorm;
  v[2 + t->dist.rank] = t->stage.wait_s;
  v[2 + P + t->dist.rank] = dt;
  v[2 + 2 * P + t->dist.rank] = gpt_peak_rss_mib();
  if (all_reduce_sum(t, v, 2 + 3 * (size_t)P, "step statistics")) return -1;
  s->loss = v[0];
  s->gnorm = v[1];
  s->wait_s = v + 2;
  s->time_s = v + 2 + P;
  s->mib = v + 2 + 2 * P;
  return 0;
}

/* One optimizer step. The gradients hold the SUM of the M microbatch means, so the norm
 * and the update divide by M (as weft-train-ddp's accumulation). */
static int step(pp_trainer *t, pp_step *s, char *err, size_t errlen) {
  gpt_run *r = &t->base;
  double M = t->f.M, t0 = gpt_now_s();
  gpt_batch_random(r->ds.train, r->ds.ntrain, t->G, r->m->cfg.seq, &r->st.rng, t->gx, t->gy);
  pp_stage_zero_grad(&t->stage);
  if (pp_stage_run(&t->stage, t->gx, t->gy, err, errlen)) return -1;
  if (pp_stage_tie_grads(&t->stage, err, errlen)) return -1;
  double sumsq = pp_stage_grad_sumsq(&t->stage), t1 = gpt_now_s();
  if (all_reduce_sum(t, &sumsq, 1, "gradient norm")) return -1;
  t->stage.wait_s += gpt_now_s() - t1;
  sumsq /= M * M;
  float scale = gpt_clip_factor(sumsq, r->o.clip) / (float)M;
  r->st.step++;
  pp_stage_update(&t->stage, &r->o.opt, r->st.step, r->st.adam_m, r->st.adam_v, scale);
  return gather_stats(t, t->stage.loss_sum / M, sqrt(sumsq), gpt_now_s() - t0, s);
}

/* Validation loss of eval_batches global batches (the windows weft-train --batch G
 * scores), pushed through the pipeline microbatch by microbatch. */
static int eval(pp_trainer *t, double *val, char *err, size_t errlen) {
  gpt_run *r = &t->base;
  int b = r->o.batch, T = r->m->cfg.seq, M = t->f.M, E = r->o.eval_batches;
  double sum = 0.0, loss = 0.0;
  for (int i = 0; i < E; i++)
    for (int k = 0; k < M; k++) {
      size_t first = (size_t)i * t->G + (size_t)k * b;
      gpt_batch_fixed(r->ds.val, r->ds.nval, b, T, first, r->x, r->y);
      if (pp_stage_eval(&t->stage, r->x, r->y, &loss, err, errlen)) return -1;
      sum += loss;
    }
  *val = t->dist.rank == t->dist.nranks - 1 ? sum / (E * M > 0 ? E * M : 1) : 0.0;
  return all_reduce_sum(t, val, 1, "validation loss");
}

static int join(pp_trainer *t, char *err, size_t errlen) {
  if (gpt_dist_join(&t->dist, PROG, "P", err, errlen)) return -1;
  if (t->f.stages && t->f.stages != t->dist.nranks) {
    snprintf(err, errlen, "--stages %d but launched on %d ranks (one stage per rank)", t->f.stages,
             t->dist.nranks);
    return -1;
  }
  return 0;
}

/* Builds (or resumes: rank 0 resolves --resume for all) the model, every stage the whole
 * flat layout, and sets up the checkpoint tracker. */
static int init_run(pp_trainer *t, char *err, size_t errlen) {
  gpt_run_opts o = t->f.c.run;
  int is_file; /* gpt_run_init tells the two forms apart again */
  gpt_ckpt_group g = gpt_dist_ckpt_group(&t->dist);
  if (o.resume && gpt_ckpt_resolve_group(&g, o.resume, t->resume, sizeof(t->resume), &is_file, err, errlen)) return -1;
  if (o.resume) o.resume = t->resume;
  if (gpt_run_init(&t->base, &o, err, errlen)) return -1;
  const gpt_trainer_flags *f = &t->f.c;
  gpt_ckpt_track_init(&t->ckpt, f->ckpt_dir, f->save_every, f->keep, &t->base.from, &t->base.st.step, f->steps);
  return 0;
}

/* A stage writes the ranges it updates: every float has one writer (the last stage's wte
 * copy is stage 0's), so any number of stages can load the checkpoint. */
static void plan_segments(pp_trainer *t) {
  for (int i = 0; i < t->stage.nranges; i++) {
    const pp_range *r = &t->stage.ranges[i];
    if (!r->copy) t->segs[t->nsegs++] = (gpt_ckpt_seg){r->lo, r->lo, r->hi - r->lo};
  }
}

static int save(pp_trainer *t, char *err, size_t errlen) {
  gpt_ckpt_seg whole;
  gpt_ckpt_save_req r = gpt_run_save_req(&t->base, PROG, t->ckpt.root, t->ckpt.keep, t->G, &whole);
  r.own.seg = t->segs;
  r.own.nseg = t->nsegs;
  return gpt_dist_ckpt_save(&t->dist, &t->ckpt, &r, err, errlen);
}

static int setup(void *self, char *err, size_t errlen) {
  pp_trainer *t = self;
  if (join(t, err, errlen) || init_run(t, err, errlen)) return -1;
  gpt_run *r = &t->base;
  t->G = t->f.M * r->o.batch;
  size_t n = (size_t)t->G * r->m->cfg.seq;
  t->gx = malloc(n * sizeof(int));
  t->gy = malloc(n * sizeof(int));
  t->statv = malloc((2 + 3 * (size_t)t->dist.nranks) * sizeof(double));
  t->wait_s = calloc((size_t)t->dist.nranks, sizeof(double));
  t->time_s = calloc((size_t)t->dist.nranks, sizeof(double));
  if (!t->gx || !t->gy || !t->statv || !t->wait_s || !t->time_s) {
    snprintf(err, errlen, "out of memory for the global batch");
    return -1;
  }
  if (pp_stage_init(&t->stage, r->m, t->dist.comm, t->dist.rank, t->dist.nranks, t->f.M, r->o.batch, t->f.sched, err,
                    errlen))
    return -1;
  plan_segments(t);
  t->rep.rank = t->dist.rank;
  t->rep.nranks = t->dist.nranks;
  t->rep.flops_per_token = gpt_flops_per_token(&r->m->cfg);
  t->rep.tokens_per_step = (double)t->G * r->m->cfg.seq;
  return gpt_dist_measure_peak(&t->dist, t->f.c.peak_gflops, &t->rep.peak);
}

/* Runs the steps; rank 0 prints and logs. */
static int train(void *self, char *err, size_t errlen) {
  pp_trainer *t = self;
  for (int i = 0; i < t->f.c.steps; i++) {
    pp_step s;
    double t0 = gpt_now_s();
    if (step(t, &s, err, errlen)) return -1;
    s.ms = (gpt_now_s() - t0) * 1e3;
    s.val_loss = NAN;
    if (gpt_trainer_eval_due(&t->f.c, t->base.st.step, i == t->f.c.steps - 1)) {
      if (eval(t, &s.val_loss, err, errlen)) return -1;
      gpt_report_eval(&t->rep, s.val_loss);
    }
    pp_report_step(t, &s);
    if (gpt_ckpt_due(&t->ckpt, t->base.st.step, i == t->f.c.steps - 1) && save(t, err, errlen)) return -1;
  }
  return 0;
}

/* The tied wte must be bit-identical on the first and last stage: compare them. */
static int check_tied(pp_trainer *t, char *err, size_t errlen) {
  if (t->dist.nranks == 1 || (t->dist.rank != 0 && t->dist.rank != t->dist.nranks - 1)) return 0;
  const gpt_tensor *wte = &t->base.m->lay.tensors[0];
  int peer = t->dist.rank == 0 ? t->dist.nranks - 1 : 0;
  weft_status_t st = weft_group_start(), st2;
  if (st == WEFT_SUCCESS)
    st = weft_send(t->base.m->params + wte->offset, wte->size, WEFT_FLOAT32, peer, t->dist.comm, NULL);
  if (st == WEFT_SUCCESS) st = weft_recv(t->stage.wte_tmp, wte->size, WEFT_FLOAT32, peer, t->dist.comm, NULL);
  st2 = weft_group_end();
  if (st == WEFT_SUCCESS) st = st2;
  if (st != WEFT_SUCCESS) return gpt_dist_fail(&t->dist, "tied wte check", st);
  if (!memcmp(t->stage.wte_tmp, t->base.m->params + wte->offset, wte->size * sizeof(float))) return 0;
  snprintf(err, errlen, "rank %d: tied wte differs from peer %d's copy", t->dist.rank, peer);
  return -1;
}

/* Every stage contributes its parameters and AdamW moments; rank 0 writes the file. */
static int save_file(pp_trainer *t, char *err, size_t errlen) {
  gpt_run *r = &t->base;
  float *tmp = malloc(r->m->lay.total * sizeof(float));
  if (!tmp) {
    snprintf(err, errlen, "out of memory for the checkpoint gather");
    return -1;
  }
  float *bufs[3] = {r->m->params, r->st.adam_m, r->st.adam_v};
  int rc = 0;
  for (int i = 0; i < 3 && rc == 0; i++) rc = pp_stage_gather(&t->stage, bufs[i], tmp, bufs[i], err, errlen);
  free(tmp);
  if (rc || t->dist.rank != 0) return rc;
  if (gpt_run_save(r, t->f.c.save, err, errlen)) return -1;
  printf("# saved %s at step %ld (gathered from %d stages)\n", t->f.c.save, r->st.step, t->dist.nranks);
  return 0;
}

static int finish(void *self, char *err, size_t errlen) {
  pp_trainer *t = self;
  if (check_tied(t, err, errlen)) return -1;
  if (t->dist.rank == 0) pp_report_summary(t);
  if (t->f.c.save && save_file(t, err, errlen)) return -1;
  if (t->dist.rank == 0) pp_report_plot(t);
  return 0;
}

static void teardown(void *self) {
  pp_trainer *t = self;
  pp_stage_free(&t->stage);
  gpt_report_free(&t->rep);
  gpt_run_free(&t->base);
  free(t->gx);
  free(t->gy);
  free(t->statv);
  free(t->wait_s);
  free(t->time_s);
  if (t->dist.comm) weft_comm_destroy(t->dist.comm);
}

int main(int argc, char **argv) {
  gpt_blas_choose(argv); /* first: it may re-execute the program (blas_core.h) */
  static pp_trainer t;
  t.f = (pp_flags){.c = gpt_trainer_defaults(PROG ".csv", PROG ".png"), .M = 4, .schedule = "1f1b"};
  if (parse(argc, argv, &t.f)) return 2;
  /* Stage errors name their rank themselves. */
  return gpt_program_run(&(gpt_program){.prog = PROG, .self = &t, .dist = &t.dist, .rep = &t.rep, .flags = &t.f.c,
                                        .log_columns = ",bubble,bubble_theory", .err_names_rank = 0, .ckpt = &t.ckpt,
                                        .setup = setup,
                                        .header = pp_report_header, .train = train, .finish = finish,
                                        .teardown = teardown});
}

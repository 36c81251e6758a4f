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

#include "trainers/flags.h"
#include "trainers/loop.h"
#include "trainers/metrics.h"
#include "trainers/pipeline.h"

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
          "  --save CKPT          rank 0 gathers the stages and writes a weft-train checkpoint\n"
          "  --resume CKPT        every stage continues from a checkpoint (weft-train's or this)\n");
}

static int parse(int argc, char **argv, pp_flags *f) {
  gpt_run_opts *r = &f->run;
  const gpt_flag flags[] = {
      {"data", GPT_FLAG_STR, &r->data, 0, 0},
      {"save", GPT_FLAG_STR, &f->save, 0, 0},
      {"resume", GPT_FLAG_STR, &r->resume, 0, 0},
      {"log", GPT_FLAG_STR, &f->log, 0, 0},
      {"plot", GPT_FLAG_STR, &f->plot, 0, 0},
      {"schedule", GPT_FLAG_STR, &f->schedule, 0, 0},
      {"steps", GPT_FLAG_INT, &f->steps, 0, 100000000},
      {"layers", GPT_FLAG_INT, &r->model.layers, 1, 1024},
      {"dmodel", GPT_FLAG_INT, &r->model.dmodel, 1, 65536},
      {"heads", GPT_FLAG_INT, &r->model.heads, 1, 1024},
      {"seq", GPT_FLAG_INT, &r->model.seq, 1, 65536},
      {"batch", GPT_FLAG_INT, &r->batch, 1, 65536},
      {"microbatches", GPT_FLAG_INT, &f->M, 1, 65536},
      {"stages", GPT_FLAG_INT, &f->stages, 1, 4096},
      {"seed", GPT_FLAG_INT, &f->seed, 0, 0x7fffffffL},
      {"eval-every", GPT_FLAG_INT, &f->eval_every, 0, 100000000},
      {"eval-batches", GPT_FLAG_INT, &r->eval_batches, 0, 100000},
      {"lr", GPT_FLAG_FLOAT, &r->opt.lr, 0, 0},
      {"wd", GPT_FLAG_FLOAT, &r->opt.weight_decay, 0, 0},
      {"clip", GPT_FLAG_FLOAT, &r->clip, 0, 0},
      {"peak-gflops", GPT_FLAG_FLOAT, &f->peak_gflops, 0, 0},
  };
  if (gpt_parse_flags("weft-train-pipeline", argc, argv, flags, (int)(sizeof(flags) / sizeof(flags[0])),
                      usage))
    return -1;
  r->seed = (uint64_t)f->seed;
  const char *why = !r->data                                    ? "--data PATH is required"
                    : pp_schedule_parse(f->schedule, &f->sched) ? "--schedule must be gpipe or 1f1b"
                                                                : NULL;
  if (!why) return 0;
  fprintf(stderr, "weft-train-pipeline: %s\n", why);
  usage(stderr);
  return -1;
}

static int comm_fail(const pp_trainer *t, const char *what, weft_status_t st, char *err, size_t errlen) {
  snprintf(err, errlen, "rank %d: %s: %s: %s", t->rank, what, weft_get_error_string(st),
           weft_get_last_error(t->comm));
  return -1;
}

static int all_reduce_sum(pp_trainer *t, double *v, size_t n, const char *what, char *err, size_t errlen) {
  weft_status_t st = weft_all_reduce(v, v, n, WEFT_FLOAT64, WEFT_SUM, t->comm, NULL);
  return st == WEFT_SUCCESS ? 0 : comm_fail(t, what, st, err, errlen);
}

/* The step's statistics, every stage filling its own entries of a zeroed vector
 * [loss, gnorm, wait[P], time[P], mib[P]], summed over ranks (exact: one writer each). */
static int gather_stats(pp_trainer *t, double loss, double gnorm, double dt, pp_step *s, char *err,
                        size_t errlen) {
  int P = t->nranks;
  double *v = t->statv;
  memset(v, 0, (2 + 3 * (size_t)P) * sizeof(double));
  if (t->rank == P - 1) v[0] = loss;
  if (t->rank == 0) v[1] = gnorm;
  v[2 + t->rank] = t->stage.wait_s;
  v[2 + P + t->rank] = dt;
  v[2 + 2 * P + t->rank] = gpt_peak_rss_mib();
  if (all_reduce_sum(t, v, 2 + 3 * (size_t)P, "step statistics", err, errlen)) return -1;
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
  if (all_reduce_sum(t, &sumsq, 1, "gradient norm", err, errlen)) return -1;
  t->stage.wait_s += gpt_now_s() - t1;
  sumsq /= M * M;
  float scale = gpt_clip_factor(sumsq, r->o.clip) / (float)M;
  r->st.step++;
  pp_stage_update(&t->stage, &r->o.opt, r->st.step, r->st.adam_m, r->st.adam_v, scale);
  return gather_stats(t, t->stage.loss_sum / M, sqrt(sumsq), gpt_now_s() - t0, s, err, errlen);
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
  *val = t->rank == t->nranks - 1 ? sum / (E * M > 0 ? E * M : 1) : 0.0;
  return all_reduce_sum(t, val, 1, "validation loss", err, errlen);
}

/* Measured on every rank at once (after a barrier, so they share the cores as training
 * will), then averaged; --peak-gflops skips the measurement. */
static int measure_peak(pp_trainer *t, char *err, size_t errlen) {
  if (t->f.peak_gflops > 0) {
    t->peak = (gpt_peak){t->f.peak_gflops, 0.0, "given"};
    return 0;
  }
  weft_status_t st = weft_barrier(t->comm, NULL);
  if (st != WEFT_SUCCESS) return comm_fail(t, "barrier before the peak measurement", st, err, errlen);
  gpt_measure_peak(&t->peak);
  double v[2] = {t->peak.fma_gflops / t->nranks, t->peak.sgemm_gflops / t->nranks};
  if (all_reduce_sum(t, v, 2, "peak FLOP/s", err, errlen)) return -1;
  t->peak.fma_gflops = v[0];
  t->peak.sgemm_gflops = v[1];
  return 0;
}

static int join(pp_trainer *t, char *err, size_t errlen) {
  weft_status_t st = weft_comm_init_from_env(&t->comm, NULL);
  if (st != WEFT_SUCCESS) {
    snprintf(err, errlen, "weft_comm_init_from_env: %s (launch with weftrun -n P)",
             weft_get_last_error(NULL));
    t->comm = NULL;
    return -1;
  }
  weft_comm_user_rank(t->comm, &t->rank);
  weft_comm_count(t->comm, &t->nranks);
  if (t->f.stages && t->f.stages != t->nranks) {
    snprintf(err, errlen, "--stages %d but launched on %d ranks (one stage per rank)", t->f.stages,
             t->nranks);
    return -1;
  }
  return 0;
}

static int setup(pp_trainer *t, char *err, size_t errlen) {
  if (join(t, err, errlen) || gpt_run_init(&t->base, &t->f.run, err, errlen)) return -1;
  gpt_run *r = &t->base;
  t->G = t->f.M * r->o.batch;
  size_t n = (size_t)t->G * r->m->cfg.seq;
  t->gx = malloc(n * sizeof(int));
  t->gy = malloc(n * sizeof(int));
  t->statv = malloc((2 + 3 * (size_t)t->nranks) * sizeof(double));
  t->tot.step_s = calloc((size_t)t->f.steps + 1, sizeof(double));
  t->tot.wait_s = calloc((size_t)t->nranks, sizeof(double));
  t->tot.time_s = calloc((size_t)t->nranks, sizeof(double));
  if (!t->gx || !t->gy || !t->statv || !t->tot.step_s || !t->tot.wait_s || !t->tot.time_s) {
    snprintf(err, errlen, "out of memory for the global batch");
    return -1;
  }
  if (pp_stage_init(&t->stage, r->m, t->comm, t->rank, t->nranks, t->f.M, r->o.batch, t->f.sched, err,
                    errlen))
    return -1;
  return measure_peak(t, err, errlen);
}

/* Runs the steps; rank 0 prints and logs. */
static int train(pp_trainer *t, char *err, size_t errlen) {
  t->tot.last_val = NAN;
  for (int i = 0; i < t->f.steps; i++) {
    pp_step s;
    double t0 = gpt_now_s();
    if (step(t, &s, err, errlen)) return -1;
    s.ms = (gpt_now_s() - t0) * 1e3;
    s.val_loss = NAN;
    int last = i == t->f.steps - 1, every = t->f.eval_every;
    if (t->base.o.eval_batches > 0 && ((every > 0 && t->base.st.step % every == 0) || last)) {
      if (eval(t, &s.val_loss, err, errlen)) return -1;
      t->tot.last_val = s.val_loss;
    }
    pp_report_step(t, &s);
  }
  return 0;
}

/* The tied wte must be bit-identical on the first and last stage: compare them. */
static int check_tied(pp_trainer *t, char *err, size_t errlen) {
  if (t->nranks == 1 || (t->rank != 0 && t->rank != t->nranks - 1)) return 0;
  const gpt_tensor *wte = &t->base.m->lay.tensors[0];
  int peer = t->rank == 0 ? t->nranks - 1 : 0;
  weft_status_t st = weft_group_start(), st2;
  if (st == WEFT_SUCCESS)
    st = weft_send(t->base.m->params + wte->offset, wte->size, WEFT_FLOAT32, peer, t->comm, NULL);
  if (st == WEFT_SUCCESS) st = weft_recv(t->stage.wte_tmp, wte->size, WEFT_FLOAT32, peer, t->comm, NULL);
  st2 = weft_group_end();
  if (st == WEFT_SUCCESS) st = st2;
  if (st != WEFT_SUCCESS) return comm_fail(t, "tied wte check", st, err, errlen);
  if (!memcmp(t->stage.wte_tmp, t->base.m->params + wte->offset, wte->size * sizeof(float))) return 0;
  snprintf(err, errlen, "rank %d: tied wte differs from peer %d's copy", t->rank, peer);
  return -1;
}

/* Every stage contributes its parameters and AdamW moments; rank 0 writes the file. */
static int save(pp_trainer *t, char *err, size_t errlen) {
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
  if (rc || t->rank != 0) return rc;
  if (gpt_run_save(r, t->f.save, err, errlen)) return -1;
  printf("# saved %s at step %ld (gathered from %d stages)\n", t->f.save, r->st.step, t->nranks);
  return 0;
}

static int finish(pp_trainer *t, char *err, size_t errlen) {
  if (check_tied(t, err, errlen)) return -1;
  if (t->rank == 0) pp_report_summary(t);
  if (t->f.save && save(t, err, errlen)) return -1;
  if (t->rank == 0) pp_report_plot(t);
  return 0;
}

static void teardown(pp_trainer *t) {
  pp_stage_free(&t->stage);
  if (t->log) fclose(t->log);
  gpt_run_free(&t->base);
  free(t->gx);
  free(t->gy);
  free(t->statv);
  free(t->tot.step_s);
  free(t->tot.wait_s);
  free(t->tot.time_s);
  if (t->comm) weft_comm_destroy(t->comm);
}

int main(int argc, char **argv) {
  static pp_trainer t;
  t.f = (pp_flags){.run = gpt_run_defaults(),
                   .steps = 100,
                   .seed = 1,
                   .M = 4,
                   .schedule = "1f1b",
                   .log = "weft-train-pipeline.csv",
                   .plot = "weft-train-pipeline.png"};
  if (parse(argc, argv, &t.f)) return 2;
  char err[1024] = "";
  int rc = setup(&t, err, sizeof(err));
  if (rc == 0 && t.rank == 0) rc = pp_report_open(&t, err, sizeof(err));
  if (rc == 0) rc = train(&t, err, sizeof(err));
  if (rc == 0) rc = finish(&t, err, sizeof(err));
  if (rc) {
    /* Exit without destroying the communicator: the other ranks then see this rank gone
     * and fail at once, instead of waiting for their deadline. */
    if (err[0]) fprintf(stderr, "weft-train-pipeline: %s\n", err);
    return 1;
  }
  teardown(&t);
  return 0;
}

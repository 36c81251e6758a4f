/* trainers/fsdp.c: weft-train-fsdp, fully sharded data-parallel (ZeRO-3) training of the
 * reference GPT (weft issue 6).
 *
 *   ./weftrun -n 2 ./weft-train-fsdp --data ../shared/data/tinyshakespeare.txt --layers 4 \
 *       --dmodel 256 --heads 4 --seq 128 --batch 16 --steps 30
 *
 * Each rank holds 1/N of the parameters, gradients and AdamW moments (fsdp_shard.h). Every
 * unit (embeddings, each block, final LayerNorm) is all-gathered just before its forward
 * and again before its backward, the next unit's gather running while this one computes;
 * a unit's gradient is reduce-scattered (WEFT_AVG) as soon as its backward is done, while
 * the previous unit's backward runs (fsdp_step.h). Then the global gradient norm is one
 * all-reduce of the shards' sums of squares, and AdamW updates the local shard only.
 *
 * Data, flags and output follow weft-train-ddp (ddp.c): a global batch of G = ranks *
 * accum * batch windows per step from the batch RNG every rank seeds alike, rank r's
 * micro-step k takes windows [(r * accum + k) * batch, + batch), so N ranks train on what
 * `weft-train --batch G` trains on and reach its losses and parameters up to fp32
 * rounding (trainers/test_fsdp.c checks it). Every rank initialises the full model from
 * the same seed (or reads the same --resume checkpoint) once, keeps its shards and frees
 * the rest. Rank 0 prints one line per step, a summary, the memory a rank holds against
 * what DDP holds, a CSV log (--log) and a PNG of the losses (--plot).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft.h>

#include "trainers/blas_core.h"
#include "trainers/dp_batch.h"
#include "trainers/fsdp_step.h"

#define PROG "weft-train-fsdp"

typedef struct fsdp_flags {
  gpt_trainer_flags c; /* c.run.batch is the per-rank micro-batch */
  int accum, no_overlap;
} fsdp_flags;

typedef struct fsdp {
  fsdp_flags f;
  gpt_dp dp; /* data, batch RNG, step count, the model's activations (no full params), job, report */
  fsdp_engine eng;
  gpt_ckpt_seg *segs; /* this rank's shards as checkpoint segments (one per unit it holds floats of) */
  int nsegs;
} fsdp;

static void usage(FILE *f) {
  fprintf(f,
          "usage: weftrun -n N weft-train-fsdp --data PATH [options]\n"
          "  --data PATH        training text (e.g. ../shared/data/tinyshakespeare.txt)\n"
          "  --steps N          optimizer steps (default 100)\n"
          "  --layers L --dmodel D --heads H --seq T   model (4 128 4 64)\n"
          "  --batch B          sequences per rank and micro-step (16); global batch N*accum*B\n"
          "  --accum K          micro-steps per optimizer step (1); each reduce-scatters its gradients\n"
          "  --no-overlap       wait for every all-gather and reduce-scatter at once (no prefetch)\n"
          "  --lr X --wd X --clip X --seed N   as weft-train (3e-4 0.1 1.0 1)\n"
          "  --eval-every K     validation loss every K steps, 0 = only at the end (0)\n"
          "  --eval-batches N   validation batches (of N*accum*B sequences) per evaluation (8)\n"
          "  --peak-gflops X    per-rank peak for MFU; 0 = measure at start-up (0)\n"
          "  --log CSV          per-step log (weft-train-fsdp.csv; \"none\" = no log)\n"
          "  --plot PNG         loss plot from the log (weft-train-fsdp.png; \"none\" = no plot)\n"
          "  --save CKPT        rank 0 gathers a single-file weft-train checkpoint at the end\n");
  gpt_trainer_ckpt_usage(f, 18);
}

static int parse(int argc, char **argv, fsdp_flags *f) {
  const gpt_flag own[] = {
      {"accum", GPT_FLAG_INT, &f->accum, 1, 65536},
      {"no-overlap", GPT_FLAG_SWITCH, &f->no_overlap, 0, 0},
  };
  return gpt_trainer_parse(PROG, argc, argv, &f->c, GPT_FLAGS_CHECKPOINT | GPT_FLAGS_SAVE | GPT_FLAGS_LOG, own,
                           (int)(sizeof(own) / sizeof(own[0])), usage);
}

static int engine_fail(const fsdp *d) {
  fprintf(stderr, PROG ": %s\n", d->eng.err);
  return -1;
}

/* Forward and backward of every micro-step; returns the mean micro-batch loss. */
static int micro_steps(fsdp *d, double *loss) {
  gpt_model *m = d->dp.base.m;
  int b = d->dp.base.o.batch, T = m->cfg.seq, K = d->f.accum;
  gpt_dp_draw(&d->dp);
  fsdp_zero_grad(&d->eng);
  *loss = 0.0;
  for (int k = 0; k < K; k++) {
    size_t off = gpt_dp_slice(&d->dp, k);
    if (fsdp_forward(&d->eng, d->dp.gx + off, d->dp.gy + off, b, T)) return engine_fail(d);
    *loss += m->loss / K;
    if (fsdp_backward(&d->eng, d->dp.gx + off, b, T)) return engine_fail(d);
  }
  return 0;
}

/* Global norm from the shards' sums of squares (one all-reduce), then AdamW on each unit's
 * shard at its flat range, so weight decay sees the right tensors. The shards hold the SUM
 * of the K micro-batch means, so the norm and the update divide by K. */
static int optimizer_step(fsdp *d, float *gnorm, double *norm_s) {
  fsdp_engine *e = &d->eng;
  const gpt_layout *lay = &d->dp.base.m->lay;
  double K = d->f.accum, t0 = gpt_now_s();
  double sumsq = gpt_grad_sumsq(e->grads, fsdp_local_total(&e->plan)) / (K * K);
  if (gpt_dist_reduce(&d->dp.dist, &sumsq, 1, WEFT_FLOAT64, WEFT_SUM, "gradient norm all-reduce")) return -1;
  *norm_s = gpt_now_s() - t0;
  *gnorm = (float)sqrt(sumsq);
  float scale = gpt_clip_factor(sumsq, d->dp.base.o.clip) / (float)K;
  d->dp.base.st.step++;
  for (int u = 0; u < e->plan.nunits; u++) {
    size_t lo, hi, off = e->plan.local_off[u];
    fsdp_shard_range(&e->plan, lay, u, d->dp.dist.rank, &lo, &hi);
    if (lo < hi)
      gpt_adamw_update(&d->dp.base.o.opt, d->dp.base.st.step, lay, lo, hi, e->params + off, e->grads + off,
                       e->adam_m + off, e->adam_v + off, scale);
  }
  return 0;
}

static int step(void *self, gpt_step_stats *s) {
  fsdp *d = self;
  double loss, comm_s, exposed_s, norm_s;
  if (micro_steps(d, &loss) || optimizer_step(d, &s->gnorm, &norm_s)) return -1;
  gpt_comm_stream_take_times(&d->eng.st, &comm_s, &exposed_s);
  /* The norm's all-reduce is blocking: all of it is exposed. */
  double v[4] = {loss, comm_s + norm_s, exposed_s + norm_s, gpt_peak_rss_mib()};
  if (gpt_dist_average(&d->dp.dist, v, 4, "step statistics")) return -1;
  *s = (gpt_step_stats){.loss = v[0], .comm_s = v[1], .exposed_s = v[2], .peak_mib = v[3], .gnorm = s->gnorm};
  return 0;
}

static int eval_loss(void *ctx, const int *x, const int *y, int b, int T, double *loss) {
  fsdp *d = ctx;
  if (fsdp_forward(&d->eng, x, y, b, T)) return engine_fail(d);
  *loss = d->dp.base.m->loss;
  return 0;
}

/* Validation loss (the windows weft-train --batch G scores, dp_batch.h). Its gathers are
 * not counted as a step's comm. */
static int eval(void *self, double *val) {
  fsdp *d = self;
  double ignored[2];
  int rc = gpt_dp_eval(&d->dp, eval_loss, d, val);
  gpt_comm_stream_take_times(&d->eng.st, &ignored[0], &ignored[1]);
  return rc;
}

/* Keeps this rank's shards of the full model gpt_run_init built, then frees the full
 * parameters, gradients and moments: from here on a rank holds 1/N of them. */
static int shard_model(fsdp *d, char *err, size_t errlen) {
  gpt_model *m = d->dp.base.m;
  if (fsdp_engine_init(&d->eng, m, d->dp.base.st.adam_m, d->dp.base.st.adam_v, d->dp.dist.comm, d->f.no_overlap, err,
                       errlen))
    return -1;
  free(m->params);
  free(m->grads);
  free(d->dp.base.st.adam_m);
  free(d->dp.base.st.adam_v);
  m->params = m->grads = d->dp.base.st.adam_m = d->dp.base.st.adam_v = NULL;
  return 0;
}

/* Each rank writes its own shards: unit u's flat range [lo, hi) lives at local_off[u]. The
 * padding is not written; a loader on any number of ranks takes the ranges it needs. */
static int plan_segments(fsdp *d, char *err, size_t errlen) {
  const fsdp_plan *p = &d->eng.plan;
  d->segs = calloc((size_t)p->nunits, sizeof(*d->segs));
  if (!d->segs) {
    snprintf(err, errlen, "out of memory for the checkpoint segments");
    return -1;
  }
  for (int u = 0; u < p->nunits; u++) {
    size_t lo, hi;
    fsdp_shard_range(p, &d->dp.base.m->lay, u, d->dp.dist.rank, &lo, &hi);
    if (lo < hi) d->segs[d->nsegs++] = (gpt_ckpt_seg){lo, p->local_off[u], hi - lo};
  }
  return 0;
}

static int save(void *self, char *err, size_t errlen) {
  fsdp *d = self;
  gpt_ckpt_local own = {{d->eng.params, d->eng.adam_m, d->eng.adam_v}, d->segs, d->nsegs};
  return gpt_dp_save(&d->dp, PROG, &own, err, errlen);
}

static int setup(void *self, char *err, size_t errlen) {
  fsdp *d = self;
  if (gpt_dp_init(&d->dp, PROG, &d->f.c, d->f.accum, err, errlen)) return -1;
  if (shard_model(d, err, errlen) || plan_segments(d, err, errlen)) return -1;
  return gpt_dp_measure_peak(&d->dp, d->f.c.peak_gflops, err, errlen);
}

static void print_memory(const fsdp *d, const char *when) {
  double mib = 1024.0 * 1024.0, full = 16.0 * d->dp.base.m->lay.total, sharded = fsdp_sharded_bytes(&d->eng);
  printf("# memory per rank%s: params+grads+AdamW m,v %.2f MiB sharded (4 x %zu floats) vs DDP's %.2f MiB "
         "full (4 x %zu) = 1/%.2f; gathered buffers peak %.2f MiB\n",
         when, sharded / mib, fsdp_local_total(&d->eng.plan), full / mib, d->dp.base.m->lay.total,
         full / sharded, fsdp_gathered_bytes(&d->eng) / mib);
}

static void print_header(const void *self) {
  const fsdp *d = self;
  const gpt_config *c = &d->dp.base.m->cfg;
  const fsdp_engine *e = &d->eng;
  gpt_report_title(&d->dp.rep, PROG, d->dp.base.o.data, c->vocab);
  printf("# model: layers %d dmodel %d heads %d seq %d, %zu params in %d units\n", c->layers, c->dmodel,
         c->heads, c->seq, d->dp.base.m->lay.total, e->plan.nunits);
  gpt_dp_print_batch(&d->dp);
  printf("# shards per rank: embeddings %zu, block %zu, final LN %zu floats; all-gather and reduce-scatter "
         "%s compute\n",
         e->plan.shard[0], e->plan.shard[1], e->plan.shard[e->plan.nunits - 1],
         d->f.no_overlap ? "NOT overlapped with" : "overlapped with");
  print_memory(d, "");
  gpt_report_peak(&d->dp.rep, 1, "", "; times are means over ranks");
  gpt_report_columns("", "");
}

/* Runs the steps; rank 0 prints and logs. */
static int train(void *self, char *err, size_t errlen) {
  fsdp *d = self;
  return gpt_run_steps(&(gpt_steps){.self = d, .flags = &d->f.c, .rep = &d->dp.rep, .step = &d->dp.base.st.step,
                                    .step_fn = step, .eval = eval, .ckpt = &d->dp.ckpt, .save = save},
                       err, errlen);
}

static void summary(const fsdp *d) {
  if (d->dp.rep.tot.steps == 0) return;
  gpt_report_throughput(&d->dp.rep, NULL);
  gpt_report_comm(&d->dp.rep);
  print_memory(d, " (summary)");
  char val[32];
  printf("# peak memory %.1f MiB per rank (RSS); final val_loss %s\n", d->dp.rep.tot.peak_mib,
         gpt_report_val_text(d->dp.rep.tot.last_val, val, sizeof(val)));
}

/* Rank 0 rebuilds the full parameters (and, for --save, the moments) from the shards:
 * prints the parameter checksum weft-train-ddp prints, then writes the checkpoint. */
static int gather_and_save(fsdp *d, char *err, size_t errlen) {
  gpt_model *m = d->dp.base.m;
  size_t n = d->dp.dist.rank == 0 ? m->lay.total : 0;
  float *p = n ? malloc(n * 4) : NULL, *am = n && d->f.c.save ? malloc(n * 4) : NULL;
  float *av = n && d->f.c.save ? malloc(n * 4) : NULL;
  int rc = -1;
  if (d->dp.dist.rank == 0 && (!p || (d->f.c.save && (!am || !av)))) {
    snprintf(err, errlen, "out of memory gathering the model for the checkpoint");
    goto out; /* the other ranks then fail at the gather, naming this rank */
  }
  if (fsdp_gather_full(&d->eng, d->eng.params, p) ||
      (d->f.c.save && (fsdp_gather_full(&d->eng, d->eng.adam_m, am) ||
                     fsdp_gather_full(&d->eng, d->eng.adam_v, av)))) {
    snprintf(err, errlen, "%s", d->eng.err);
    goto out;
  }
  rc = 0;
  if (d->dp.dist.rank != 0) goto out;
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) sum += p[i] * (double)(1 + i % 7);
  printf("# parameter checksum %.17g (weft-train-ddp's formula)\n", sum);
  if (!d->f.c.save) goto out;
  m->params = p;
  d->dp.base.st.adam_m = am;
  d->dp.base.st.adam_v = av;
  rc = gpt_run_save(&d->dp.base, d->f.c.save, err, errlen);
  m->params = d->dp.base.st.adam_m = d->dp.base.st.adam_v = NULL;
  if (rc == 0) printf("# saved %s at step %ld\n", d->f.c.save, d->dp.base.st.step);
out:
  free(p);
  free(am);
  free(av);
  return rc;
}

static int finish(void *self, char *err, size_t errlen) {
  fsdp *d = self;
  if (d->dp.dist.rank == 0) summary(d);
  if (gather_and_save(d, err, errlen)) return -1;
  gpt_dp_plot(&d->dp, PROG, &d->f.c);
  return 0;
}

static void teardown(void *self) {
  fsdp *d = self;
  if (d->eng.params) fsdp_engine_free(&d->eng);
  free(d->segs);
  gpt_dp_free(&d->dp);
}

int main(int argc, char **argv) {
  gpt_blas_choose(argv); /* first: it may re-execute the program (blas_core.h) */
  static fsdp d;
  d.f = (fsdp_flags){.c = gpt_trainer_defaults(PROG ".csv", PROG ".png"), .accum = 1};
  if (parse(argc, argv, &d.f)) return 2;
  return gpt_program_run(&(gpt_program){.prog = PROG, .self = &d, .dist = &d.dp.dist, .rep = &d.dp.rep, .flags = &d.f.c,
                                        .err_names_rank = 1, .ckpt = &d.dp.ckpt, .setup = setup, .header = print_header,
                                        .train = train, .finish = finish, .teardown = teardown});
}

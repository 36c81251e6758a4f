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

#include "trainers/flags.h"
#include "trainers/fsdp_step.h"
#include "trainers/loop.h"
#include "trainers/metrics.h"

typedef struct fsdp_flags {
  gpt_run_opts run; /* run.batch is the per-rank micro-batch */
  int steps, eval_every, seed, accum, no_overlap;
  float peak_gflops;
  const char *save, *log, *plot;
} fsdp_flags;

typedef struct fsdp {
  fsdp_flags f;
  gpt_run base; /* data, batch RNG, step count; the model's activations (no full params) */
  weft_comm_t comm;
  int rank, nranks, G; /* G: global batch in sequences */
  int *gx, *gy;        /* the global batch [G, T]; each rank reads its slices */
  fsdp_engine eng;
  gpt_peak peak; /* averaged over ranks */
  FILE *log;
} fsdp;

typedef struct step_stats {
  double loss, comm_s, exposed_s, peak_mib;
  float gnorm;
} step_stats;

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
          "  --save CKPT        rank 0 writes a weft-train checkpoint at the end\n"
          "  --resume CKPT      every rank continues from a checkpoint (of weft-train, -ddp or this)\n");
}

static int parse(int argc, char **argv, fsdp_flags *f) {
  gpt_run_opts *r = &f->run;
  const gpt_flag flags[] = {
      {"data", GPT_FLAG_STR, &r->data, 0, 0},
      {"save", GPT_FLAG_STR, &f->save, 0, 0},
      {"resume", GPT_FLAG_STR, &r->resume, 0, 0},
      {"log", GPT_FLAG_STR, &f->log, 0, 0},
      {"plot", GPT_FLAG_STR, &f->plot, 0, 0},
      {"steps", GPT_FLAG_INT, &f->steps, 0, 100000000},
      {"layers", GPT_FLAG_INT, &r->model.layers, 1, 1024},
      {"dmodel", GPT_FLAG_INT, &r->model.dmodel, 1, 65536},
      {"heads", GPT_FLAG_INT, &r->model.heads, 1, 1024},
      {"seq", GPT_FLAG_INT, &r->model.seq, 1, 65536},
      {"batch", GPT_FLAG_INT, &r->batch, 1, 65536},
      {"accum", GPT_FLAG_INT, &f->accum, 1, 65536},
      {"seed", GPT_FLAG_INT, &f->seed, 0, 0x7fffffffL},
      {"eval-every", GPT_FLAG_INT, &f->eval_every, 0, 100000000},
      {"eval-batches", GPT_FLAG_INT, &r->eval_batches, 0, 100000},
      {"lr", GPT_FLAG_FLOAT, &r->opt.lr, 0, 0},
      {"wd", GPT_FLAG_FLOAT, &r->opt.weight_decay, 0, 0},
      {"clip", GPT_FLAG_FLOAT, &r->clip, 0, 0},
      {"peak-gflops", GPT_FLAG_FLOAT, &f->peak_gflops, 0, 0},
      {"no-overlap", GPT_FLAG_SWITCH, &f->no_overlap, 0, 0},
  };
  if (gpt_parse_flags("weft-train-fsdp", argc, argv, flags, (int)(sizeof(flags) / sizeof(flags[0])), usage))
    return -1;
  r->seed = (uint64_t)f->seed;
  if (!r->data) {
    fprintf(stderr, "weft-train-fsdp: --data PATH is required\n");
    usage(stderr);
    return -1;
  }
  return 0;
}

static int comm_fail(const fsdp *d, const char *what, weft_status_t st) {
  fprintf(stderr, "weft-train-fsdp: rank %d: %s: %s: %s\n", d->rank, what, weft_get_error_string(st),
          weft_get_last_error(d->comm));
  return -1;
}

static int engine_fail(const fsdp *d) {
  fprintf(stderr, "weft-train-fsdp: %s\n", d->eng.err);
  return -1;
}

/* Mean (or sum) over ranks of n doubles, in place (blocking; the stream is idle). */
static int reduce_doubles(fsdp *d, double *v, size_t n, weft_redop_t op, const char *what) {
  weft_status_t st = weft_all_reduce(v, v, n, WEFT_FLOAT64, op, d->comm, NULL);
  return st == WEFT_SUCCESS ? 0 : comm_fail(d, what, st);
}

/* Forward and backward of every micro-step; returns the mean micro-batch loss. */
static int micro_steps(fsdp *d, double *loss) {
  gpt_model *m = d->base.m;
  int b = d->base.o.batch, T = m->cfg.seq, K = d->f.accum;
  gpt_batch_random(d->base.ds.train, d->base.ds.ntrain, d->G, T, &d->base.st.rng, d->gx, d->gy);
  fsdp_zero_grad(&d->eng);
  *loss = 0.0;
  for (int k = 0; k < K; k++) {
    size_t off = (size_t)((d->rank * K + k) * b) * T;
    if (fsdp_forward(&d->eng, d->gx + off, d->gy + off, b, T)) return engine_fail(d);
    *loss += m->loss / K;
    if (fsdp_backward(&d->eng, d->gx + off, b, T)) return engine_fail(d);
  }
  return 0;
}

/* Global norm from the shards' sums of squares (one all-reduce), then AdamW on each unit's
 * shard at its flat range, so weight decay sees the right tensors. The shards hold the SUM
 * of the K micro-batch means, so the norm and the update divide by K. */
static int optimizer_step(fsdp *d, float *gnorm, double *norm_s) {
  fsdp_engine *e = &d->eng;
  const gpt_layout *lay = &d->base.m->lay;
  double K = d->f.accum, t0 = gpt_now_s();
  double sumsq = gpt_grad_sumsq(e->grads, fsdp_local_total(&e->plan)) / (K * K);
  if (reduce_doubles(d, &sumsq, 1, WEFT_SUM, "gradient norm all-reduce")) return -1;
  *norm_s = gpt_now_s() - t0;
  *gnorm = (float)sqrt(sumsq);
  float scale = gpt_clip_factor(sumsq, d->base.o.clip) / (float)K;
  d->base.st.step++;
  for (int u = 0; u < e->plan.nunits; u++) {
    size_t lo, hi, off = e->plan.local_off[u];
    fsdp_shard_range(&e->plan, lay, u, d->rank, &lo, &hi);
    if (lo < hi)
      gpt_adamw_update(&d->base.o.opt, d->base.st.step, lay, lo, hi, e->params + off, e->grads + off,
                       e->adam_m + off, e->adam_v + off, scale);
  }
  return 0;
}

static int step(fsdp *d, step_stats *s) {
  double loss, comm_s, exposed_s, norm_s;
  if (micro_steps(d, &loss) || optimizer_step(d, &s->gnorm, &norm_s)) return -1;
  fsdp_stream_take_times(&d->eng.st, &comm_s, &exposed_s);
  /* The norm's all-reduce is blocking: all of it is exposed. */
  double v[4] = {loss, comm_s + norm_s, exposed_s + norm_s, gpt_peak_rss_mib()};
  if (reduce_doubles(d, v, 4, WEFT_AVG, "step statistics")) return -1;
  *s = (step_stats){v[0], v[1], v[2], v[3], s->gnorm};
  return 0;
}

/* Validation loss of eval_batches global batches, each rank scoring its slices (the same
 * windows weft-train --batch G scores). Its gathers are not counted as a step's comm. */
static int eval(fsdp *d, double *val) {
  gpt_model *m = d->base.m;
  int b = d->base.o.batch, T = m->cfg.seq, K = d->f.accum, E = d->base.o.eval_batches;
  double sum = 0.0, ignored[2];
  for (int i = 0; i < E; i++)
    for (int k = 0; k < K; k++) {
      size_t first = (size_t)i * d->G + (size_t)(d->rank * K + k) * b;
      gpt_batch_fixed(d->base.ds.val, d->base.ds.nval, b, T, first, d->base.x, d->base.y);
      if (fsdp_forward(&d->eng, d->base.x, d->base.y, b, T)) return engine_fail(d);
      sum += m->loss;
    }
  fsdp_stream_take_times(&d->eng.st, &ignored[0], &ignored[1]);
  *val = sum / (E * K > 0 ? E * K : 1);
  return reduce_doubles(d, val, 1, WEFT_AVG, "validation loss");
}

static double mfu(const fsdp *d, double tokens_per_s) {
  return gpt_flops_per_token(&d->base.m->cfg) * tokens_per_s / (d->nranks * d->peak.fma_gflops * 1e9);
}

/* Measured on every rank at once (after a barrier, so they share the cores as training
 * will), then averaged; --peak-gflops skips the measurement. */
static int measure_peak(fsdp *d) {
  if (d->f.peak_gflops > 0) {
    d->peak = (gpt_peak){d->f.peak_gflops, 0.0, "given"};
    return 0;
  }
  weft_status_t st = weft_barrier(d->comm, NULL);
  if (st != WEFT_SUCCESS) return comm_fail(d, "barrier before the peak measurement", st);
  gpt_measure_peak(&d->peak);
  double v[2] = {d->peak.fma_gflops, d->peak.sgemm_gflops};
  if (reduce_doubles(d, v, 2, WEFT_AVG, "peak FLOP/s")) return -1;
  d->peak.fma_gflops = v[0];
  d->peak.sgemm_gflops = v[1];
  return 0;
}

/* Keeps this rank's shards of the full model gpt_run_init built, then frees the full
 * parameters, gradients and moments: from here on a rank holds 1/N of them. */
static int shard_model(fsdp *d, char *err, size_t errlen) {
  gpt_model *m = d->base.m;
  if (fsdp_engine_init(&d->eng, m, d->base.st.adam_m, d->base.st.adam_v, d->comm, d->f.no_overlap, err,
                       errlen))
    return -1;
  free(m->params);
  free(m->grads);
  free(d->base.st.adam_m);
  free(d->base.st.adam_v);
  m->params = m->grads = d->base.st.adam_m = d->base.st.adam_v = NULL;
  return 0;
}

static int setup(fsdp *d, char *err, size_t errlen) {
  weft_status_t st = weft_comm_init_from_env(&d->comm, NULL);
  if (st != WEFT_SUCCESS) {
    snprintf(err, errlen, "weft_comm_init_from_env: %s (launch with weftrun -n N)",
             weft_get_last_error(NULL));
    d->comm = NULL;
    return -1;
  }
  weft_comm_user_rank(d->comm, &d->rank);
  weft_comm_count(d->comm, &d->nranks);
  if (gpt_run_init(&d->base, &d->f.run, err, errlen)) return -1;
  d->G = d->nranks * d->f.accum * d->base.o.batch;
  size_t n = (size_t)d->G * d->base.m->cfg.seq;
  d->gx = malloc(n * sizeof(int));
  d->gy = malloc(n * sizeof(int));
  if (!d->gx || !d->gy) {
    snprintf(err, errlen, "out of memory for the global batch");
    return -1;
  }
  if (shard_model(d, err, errlen)) return -1;
  if (measure_peak(d)) {
    snprintf(err, errlen, "peak measurement failed");
    return -1;
  }
  return 0;
}

static void print_memory(const fsdp *d, const char *when) {
  double mib = 1024.0 * 1024.0, full = 16.0 * d->base.m->lay.total, sharded = fsdp_sharded_bytes(&d->eng);
  printf("# memory per rank%s: params+grads+AdamW m,v %.2f MiB sharded (4 x %zu floats) vs DDP's %.2f MiB "
         "full (4 x %zu) = 1/%.2f; gathered buffers peak %.2f MiB\n",
         when, sharded / mib, fsdp_local_total(&d->eng.plan), full / mib, d->base.m->lay.total,
         full / sharded, fsdp_gathered_bytes(&d->eng) / mib);
}

static void print_header(const fsdp *d) {
  const gpt_config *c = &d->base.m->cfg;
  const fsdp_engine *e = &d->eng;
  printf("# weft-train-fsdp: %d ranks, %s, vocab %d\n", d->nranks, d->base.o.data, c->vocab);
  printf("# model: layers %d dmodel %d heads %d seq %d, %zu params in %d units\n", c->layers, c->dmodel,
         c->heads, c->seq, d->base.m->lay.total, e->plan.nunits);
  printf("# batch %d per rank x accum %d x %d ranks = %d sequences (%d tokens) per step\n", d->base.o.batch,
         d->f.accum, d->nranks, d->G, d->G * c->seq);
  printf("# shards per rank: embeddings %zu, block %zu, final LN %zu floats; all-gather and reduce-scatter "
         "%s compute\n",
         e->plan.shard[0], e->plan.shard[1], e->plan.shard[e->plan.nunits - 1],
         d->f.no_overlap ? "NOT overlapped with" : "overlapped with");
  print_memory(d, "");
  if (d->peak.sgemm_gflops > 0)
    printf("# peak per rank: FMA loop %.1f GFLOP/s (%s), sgemm 512^3 %.1f GFLOP/s = %.0f%% of it\n",
           d->peak.fma_gflops, d->peak.isa, d->peak.sgemm_gflops,
           100.0 * d->peak.sgemm_gflops / d->peak.fma_gflops);
  else
    printf("# peak per rank: %.1f GFLOP/s (given)\n", d->peak.fma_gflops);
  printf("# %.3f MFLOP/token; MFU = that x tokens/s / (%d ranks x peak); times are means over ranks\n",
         gpt_flops_per_token(c) / 1e6, d->nranks);
  printf("%6s %10s %8s %8s %9s %6s %8s %8s %8s\n", "step", "loss", "gnorm", "ms", "tok/s", "MFU", "comm_ms",
         "expo_ms", "peakMiB");
}

typedef struct totals {
  int steps;
  double s, s_after_first, comm_s, exposed_s, peak_mib, last_val;
  double *step_s; /* every step's time, for the median (robust on a shared machine) */
} totals;

static void account(totals *tot, const step_stats *s, double dt, int first) {
  tot->step_s[tot->steps++] = dt;
  tot->s += dt;
  tot->s_after_first += first ? 0.0 : dt;
  tot->comm_s += s->comm_s;
  tot->exposed_s += s->exposed_s;
  tot->peak_mib = s->peak_mib;
}

/* Runs the steps; rank 0 prints and logs. */
static int train(fsdp *d, totals *tot) {
  double tokens = (double)d->G * d->base.m->cfg.seq;
  tot->last_val = NAN;
  for (int i = 0; i < d->f.steps; i++) {
    step_stats s;
    double t0 = gpt_now_s();
    if (step(d, &s)) return -1;
    double dt = gpt_now_s() - t0;
    gpt_step_row row = {
        d->base.st.step,   s.loss,    NAN, dt * 1e3, tokens / dt, mfu(d, tokens / dt), s.comm_s * 1e3,
        s.exposed_s * 1e3, s.peak_mib};
    int last = i == d->f.steps - 1, every = d->f.eval_every;
    if (d->base.o.eval_batches > 0 && ((every > 0 && row.step % every == 0) || last)) {
      if (eval(d, &row.val_loss)) return -1;
      tot->last_val = row.val_loss;
    }
    account(tot, &s, dt, i == 0);
    if (d->rank != 0) continue;
    printf("%6ld %10.6f %8.4f %8.1f %9.0f %5.1f%% %8.1f %8.1f %8.1f\n", row.step, row.loss, s.gnorm, row.ms,
           row.tokens_per_s, 100.0 * row.mfu, row.comm_ms, row.exposed_ms, row.peak_mib);
    if (!isnan(row.val_loss)) printf("%6ld val_loss %.6f\n", row.step, row.val_loss);
    fflush(stdout);
    if (d->log) gpt_log_row(d->log, &row);
  }
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void summary(const fsdp *d, const totals *t) {
  if (t->steps == 0) return;
  double tokens = (double)d->G * d->base.m->cfg.seq, tps = tokens * t->steps / t->s;
  printf("# summary: %d steps in %.2f s, %.0f tokens/s, MFU %.1f%% of the peak", t->steps, t->s, tps,
         100.0 * mfu(d, tps));
  if (d->peak.sgemm_gflops > 0)
    printf(" (%.1f%% of what sgemm reaches)",
           100.0 * mfu(d, tps) * d->peak.fma_gflops / d->peak.sgemm_gflops);
  printf("\n");
  if (t->steps > 1) {
    double tps1 = tokens * (t->steps - 1) / t->s_after_first;
    printf("# without step 1 (warm-up): %.0f tokens/s, MFU %.1f%%\n", tps1, 100.0 * mfu(d, tps1));
  }
  qsort(t->step_s, (size_t)t->steps, sizeof(double), cmp_double);
  double med = t->step_s[t->steps / 2];
  printf("# median step %.1f ms: %.0f tokens/s, MFU %.1f%%\n", med * 1e3, tokens / med,
         100.0 * mfu(d, tokens / med));
  printf(
      "# comm %.1f ms/step, exposed %.1f ms/step (%.0f%% hidden behind compute), %.0f%% of step time "
      "exposed\n",
      t->comm_s * 1e3 / t->steps, t->exposed_s * 1e3 / t->steps,
      t->comm_s > t->exposed_s ? 100.0 * (1.0 - t->exposed_s / t->comm_s) : 0.0, 100.0 * t->exposed_s / t->s);
  print_memory(d, " (summary)");
  printf("# peak memory %.1f MiB per rank (RSS); final val_loss %.6f\n", t->peak_mib, t->last_val);
}

/* Rank 0 rebuilds the full parameters (and, for --save, the moments) from the shards:
 * prints the parameter checksum weft-train-ddp prints, then writes the checkpoint. */
static int gather_and_save(fsdp *d, char *err, size_t errlen) {
  gpt_model *m = d->base.m;
  size_t n = d->rank == 0 ? m->lay.total : 0;
  float *p = n ? malloc(n * 4) : NULL, *am = n && d->f.save ? malloc(n * 4) : NULL;
  float *av = n && d->f.save ? malloc(n * 4) : NULL;
  int rc = -1;
  if (d->rank == 0 && (!p || (d->f.save && (!am || !av)))) {
    snprintf(err, errlen, "out of memory gathering the model for the checkpoint");
    goto out; /* the other ranks then fail at the gather, naming this rank */
  }
  if (fsdp_gather_full(&d->eng, d->eng.params, p) ||
      (d->f.save && (fsdp_gather_full(&d->eng, d->eng.adam_m, am) ||
                     fsdp_gather_full(&d->eng, d->eng.adam_v, av)))) {
    snprintf(err, errlen, "%s", d->eng.err);
    goto out;
  }
  rc = 0;
  if (d->rank != 0) goto out;
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) sum += p[i] * (double)(1 + i % 7);
  printf("# parameter checksum %.17g (weft-train-ddp's formula)\n", sum);
  if (!d->f.save) goto out;
  m->params = p;
  d->base.st.adam_m = am;
  d->base.st.adam_v = av;
  rc = gpt_run_save(&d->base, d->f.save, err, errlen);
  m->params = d->base.st.adam_m = d->base.st.adam_v = NULL;
  if (rc == 0) printf("# saved %s at step %ld\n", d->f.save, d->base.st.step);
out:
  free(p);
  free(am);
  free(av);
  return rc;
}

static int finish(fsdp *d, const totals *t, char *err, size_t errlen) {
  if (d->rank == 0) summary(d, t);
  if (gather_and_save(d, err, errlen)) return -1;
  if (d->rank != 0 || !d->log || !d->f.plot || !strcmp(d->f.plot, "none")) return 0;
  char title[128], msg[512];
  snprintf(title, sizeof(title), "weft-train-fsdp, %d ranks, %d tokens/step", d->nranks,
           d->G * d->base.m->cfg.seq);
  fclose(d->log);
  d->log = NULL;
  gpt_plot_loss(d->f.log, d->f.plot, title, msg, sizeof(msg));
  printf("# log %s; %s\n", d->f.log, msg);
  return 0;
}

static void teardown(fsdp *d) {
  if (d->eng.params) fsdp_engine_free(&d->eng);
  if (d->log) fclose(d->log);
  gpt_run_free(&d->base);
  free(d->gx);
  free(d->gy);
  if (d->comm) weft_comm_destroy(d->comm);
}

int main(int argc, char **argv) {
  static fsdp d;
  d.f = (fsdp_flags){.run = gpt_run_defaults(),
                     .steps = 100,
                     .seed = 1,
                     .accum = 1,
                     .log = "weft-train-fsdp.csv",
                     .plot = "weft-train-fsdp.png"};
  if (parse(argc, argv, &d.f)) return 2;
  char err[512] = "";
  totals t = {.step_s = calloc((size_t)d.f.steps + 1, sizeof(double))};
  int rc = t.step_s ? setup(&d, err, sizeof(err)) : -1;
  if (rc == 0 && d.rank == 0 && strcmp(d.f.log, "none")) {
    d.log = gpt_log_open(d.f.log, err, sizeof(err));
    rc = d.log ? 0 : -1;
  }
  if (rc == 0 && d.rank == 0) print_header(&d);
  if (rc == 0) rc = train(&d, &t);
  if (rc == 0) rc = finish(&d, &t, err, sizeof(err));
  if (rc) {
    /* Exit without destroying the communicator: the other ranks then see this rank gone
     * and fail at once, instead of waiting for their deadline. */
    if (err[0]) fprintf(stderr, "weft-train-fsdp: rank %d: %s\n", d.rank, err);
    return 1;
  }
  teardown(&d);
  free(t.step_s);
  return 0;
}

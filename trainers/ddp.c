/* trainers/ddp.c: weft-train-ddp, data-parallel training of the reference GPT (weft issue 6).
 *
 *   ./weftrun -n 2 ./weft-train-ddp --data ../shared/data/tinyshakespeare.txt --layers 4 \
 *       --dmodel 256 --heads 4 --seq 128 --batch 16 --steps 20
 *
 * Every rank holds the whole model (rank 0's initial parameters are broadcast) and runs
 * --batch sequences per micro-step, --accum micro-steps per optimizer step. The gradients
 * are averaged with weft_all_reduce(WEFT_AVG) in buckets that start during the last
 * micro-step's backward (ddp_reducer.h); --no-overlap starts them all after it instead,
 * for comparison. Earlier micro-steps only accumulate, as PyTorch's no_sync().
 *
 * Data: one global batch of G = ranks * accum * batch windows per step is drawn from the
 * batch RNG every rank seeds alike (the one weft-train uses), and rank r's micro-step k
 * takes windows [(r * accum + k) * batch, + batch). So N ranks train on exactly the
 * windows `weft-train --batch G` trains on, and reach the same losses and parameters up to
 * fp32 rounding (trainers/test_ddp.c checks it).
 *
 * Output (rank 0): one line per step (loss, gradient norm, ms, tokens/s, MFU, comm time,
 * the part of it exposed, peak memory; averaged over ranks), a summary, a CSV log of every
 * step (--log) and a PNG of the losses (--plot).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft.h>

#include "trainers/ddp_reducer.h"
#include "trainers/flags.h"
#include "trainers/loop.h"
#include "trainers/metrics.h"

typedef struct ddp_flags {
  gpt_run_opts run; /* run.batch is the per-rank micro-batch */
  int steps, eval_every, seed, accum, no_overlap;
  float bucket_mb, first_bucket_mb, peak_gflops;
  const char *save, *log, *plot;
} ddp_flags;

typedef struct ddp {
  ddp_flags f;
  gpt_run base; /* data, model (sized for one micro-batch), AdamW state, batch RNG */
  weft_comm_t comm;
  int rank, nranks, G; /* G: global batch in sequences */
  int *gx, *gy;        /* the global batch [G, T]; each rank reads its slices */
  ddp_reducer red;
  gpt_peak peak; /* averaged over ranks */
  FILE *log;
} ddp;

/* What a step measured, averaged over ranks (loss is then the global batch's loss). */
typedef struct step_stats {
  double loss, comm_s, exposed_s, peak_mib;
  float gnorm;
} step_stats;

static void usage(FILE *f) {
  fprintf(f,
          "usage: weftrun -n N weft-train-ddp --data PATH [options]\n"
          "  --data PATH        training text (e.g. ../shared/data/tinyshakespeare.txt)\n"
          "  --steps N          optimizer steps (default 100)\n"
          "  --layers L --dmodel D --heads H --seq T   model (4 128 4 64)\n"
          "  --batch B          sequences per rank and micro-step (16); global batch N*accum*B\n"
          "  --accum K          micro-steps per optimizer step (1); all-reduce on the last only\n"
          "  --bucket-mb X      gradient bucket cap in MiB (25)   --first-bucket-mb X  first one (1)\n"
          "  --no-overlap       all-reduce every bucket after the backward, not during it\n"
          "  --lr X --wd X --clip X --seed N   as weft-train (3e-4 0.1 1.0 1)\n"
          "  --eval-every K     validation loss every K steps, 0 = only at the end (0)\n"
          "  --eval-batches N   validation batches (of N*accum*B sequences) per evaluation (8)\n"
          "  --peak-gflops X    per-rank peak for MFU; 0 = measure at start-up (0)\n"
          "  --log CSV          per-step log (weft-train-ddp.csv; \"none\" = no log)\n"
          "  --plot PNG         loss plot from the log (weft-train-ddp.png; \"none\" = no plot)\n"
          "  --save CKPT        rank 0 writes a weft-train checkpoint at the end\n"
          "  --resume CKPT      every rank continues from a checkpoint (of weft-train or this)\n");
}

static int parse(int argc, char **argv, ddp_flags *f) {
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
      {"bucket-mb", GPT_FLAG_FLOAT, &f->bucket_mb, 0, 0},
      {"first-bucket-mb", GPT_FLAG_FLOAT, &f->first_bucket_mb, 0, 0},
      {"peak-gflops", GPT_FLAG_FLOAT, &f->peak_gflops, 0, 0},
      {"no-overlap", GPT_FLAG_SWITCH, &f->no_overlap, 0, 0},
  };
  if (gpt_parse_flags("weft-train-ddp", argc, argv, flags, (int)(sizeof(flags) / sizeof(flags[0])), usage))
    return -1;
  r->seed = (uint64_t)f->seed;
  if (!r->data) {
    fprintf(stderr, "weft-train-ddp: --data PATH is required\n");
    usage(stderr);
    return -1;
  }
  return 0;
}

static int comm_fail(const ddp *d, const char *what, weft_status_t st) {
  fprintf(stderr, "weft-train-ddp: rank %d: %s: %s: %s\n", d->rank, what, weft_get_error_string(st),
          weft_get_last_error(d->comm));
  return -1;
}

/* Mean over ranks of n doubles, in place (blocking). */
static int average(ddp *d, double *v, size_t n, const char *what) {
  weft_status_t st = weft_all_reduce(v, v, n, WEFT_FLOAT64, WEFT_AVG, d->comm, NULL);
  return st == WEFT_SUCCESS ? 0 : comm_fail(d, what, st);
}

/* The last micro-step's backward, unit by unit (gpt_backward's order), handing each
 * finished unit's gradients to the reducer. */
static weft_status_t backward_overlapped(ddp *d) {
  gpt_model *m = d->base.m;
  int L = m->cfg.layers, B = m->B, T = m->T;
  const size_t *uoff = m->lay.unit_offset;
  float *dx = m->dres[0], *g_embed = gpt_unit_ptr(m, m->grads, 0);
  gpt_head_backward(m, gpt_unit_ptr(m, m->params, L + 1), gpt_unit_ptr(m, m->params, 0),
                    gpt_unit_ptr(m, m->grads, L + 1), g_embed, dx, B, T);
  weft_status_t st = ddp_reducer_ready_from(&d->red, uoff[L + 1]);
  for (int l = L - 1; l >= 0 && st == WEFT_SUCCESS; l--) {
    gpt_block_backward(m, l, gpt_unit_ptr(m, m->params, 1 + l), gpt_unit_ptr(m, m->grads, 1 + l), dx, dx, B,
                       T);
    st = ddp_reducer_ready_from(&d->red, uoff[1 + l]);
  }
  if (st != WEFT_SUCCESS) return st;
  gpt_embed_backward(m, g_embed, m->tokens, dx, B, T);
  return ddp_reducer_ready_from(&d->red, 0);
}

/* Forward and backward of every micro-step; returns the mean micro-batch loss. */
static int micro_steps(ddp *d, double *loss, double *exposed_s, double *comm_s) {
  gpt_model *m = d->base.m;
  int b = d->base.o.batch, T = m->cfg.seq, K = d->f.accum;
  gpt_batch_random(d->base.ds.train, d->base.ds.ntrain, d->G, T, &d->base.st.rng, d->gx, d->gy);
  gpt_zero_grad(m);
  ddp_reducer_begin(&d->red);
  *loss = 0.0;
  weft_status_t st = WEFT_SUCCESS;
  for (int k = 0; k < K; k++) {
    size_t off = (size_t)((d->rank * K + k) * b) * T;
    gpt_forward(m, d->gx + off, d->gy + off, b, T);
    *loss += m->loss / K;
    if (k < K - 1 || d->f.no_overlap) gpt_backward(m);
    if (k == K - 1) st = d->f.no_overlap ? ddp_reducer_ready_from(&d->red, 0) : backward_overlapped(d);
  }
  if (st != WEFT_SUCCESS) return comm_fail(d, "gradient all-reduce (enqueue)", st);
  st = ddp_reducer_wait(&d->red, exposed_s, comm_s);
  return st == WEFT_SUCCESS ? 0 : comm_fail(d, "gradient all-reduce", st);
}

/* One optimizer step on the averaged gradients. They hold the SUM of the K micro-batch
 * means, so the norm and the update divide by K. Every rank holds bit-identical averaged
 * gradients, so every rank computes the same norm and the same update. */
static int step(ddp *d, step_stats *s) {
  gpt_model *m = d->base.m;
  double loss, exposed_s, comm_s, K = d->f.accum;
  if (micro_steps(d, &loss, &exposed_s, &comm_s)) return -1;
  double sumsq = gpt_grad_sumsq(m->grads, m->lay.total) / (K * K);
  s->gnorm = (float)sqrt(sumsq);
  float scale = gpt_clip_factor(sumsq, d->base.o.clip) / (float)K;
  d->base.st.step++;
  gpt_adamw_update(&d->base.o.opt, d->base.st.step, &m->lay, 0, m->lay.total, m->params, m->grads,
                   d->base.st.adam_m, d->base.st.adam_v, scale);
  double v[4] = {loss, comm_s, exposed_s, gpt_peak_rss_mib()};
  if (average(d, v, 4, "step statistics")) return -1;
  *s = (step_stats){v[0], v[1], v[2], v[3], s->gnorm};
  return 0;
}

/* Validation loss of eval_batches global batches, each rank scoring its slices (the same
 * windows weft-train --batch G scores). */
static int eval(ddp *d, double *val) {
  gpt_model *m = d->base.m;
  int b = d->base.o.batch, T = m->cfg.seq, K = d->f.accum, E = d->base.o.eval_batches;
  double sum = 0.0;
  for (int i = 0; i < E; i++)
    for (int k = 0; k < K; k++) {
      size_t first = (size_t)i * d->G + (size_t)(d->rank * K + k) * b;
      gpt_batch_fixed(d->base.ds.val, d->base.ds.nval, b, T, first, d->base.x, d->base.y);
      sum += gpt_eval_loss(m, d->base.x, d->base.y, b, T);
    }
  *val = sum / (E * K > 0 ? E * K : 1);
  return average(d, val, 1, "validation loss");
}

static double mfu(const ddp *d, double tokens_per_s) {
  return gpt_flops_per_token(&d->base.m->cfg) * tokens_per_s / (d->nranks * d->peak.fma_gflops * 1e9);
}

/* Measured on every rank at once (after a barrier, so they share the cores as training
 * will), then averaged; --peak-gflops skips the measurement. */
static int measure_peak(ddp *d) {
  if (d->f.peak_gflops > 0) {
    d->peak = (gpt_peak){d->f.peak_gflops, 0.0, "given"};
    return 0;
  }
  weft_status_t st = weft_barrier(d->comm, NULL);
  if (st != WEFT_SUCCESS) return comm_fail(d, "barrier before the peak measurement", st);
  gpt_measure_peak(&d->peak);
  double v[2] = {d->peak.fma_gflops, d->peak.sgemm_gflops};
  if (average(d, v, 2, "peak FLOP/s")) return -1;
  d->peak.fma_gflops = v[0];
  d->peak.sgemm_gflops = v[1];
  return 0;
}

static int setup(ddp *d, char *err, size_t errlen) {
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
  /* Replicas start from rank 0's parameters, as DDP's constructor broadcasts them. */
  gpt_model *m = d->base.m;
  st = weft_broadcast(m->params, m->params, m->lay.total, WEFT_FLOAT32, 0, d->comm, NULL);
  if (st != WEFT_SUCCESS) {
    snprintf(err, errlen, "broadcast of the initial parameters: %s", weft_get_last_error(d->comm));
    return -1;
  }
  size_t mib = 1024 * 1024;
  if (ddp_reducer_init(&d->red, &m->lay, m->grads, (size_t)(d->f.bucket_mb * mib),
                       (size_t)(d->f.first_bucket_mb * mib), d->comm, err, errlen))
    return -1;
  if (measure_peak(d)) {
    snprintf(err, errlen, "peak measurement failed");
    return -1;
  }
  return 0;
}

static void print_header(const ddp *d) {
  const gpt_config *c = &d->base.m->cfg;
  const gpt_model *m = d->base.m;
  printf("# weft-train-ddp: %d ranks, %s, vocab %d\n", d->nranks, d->base.o.data, c->vocab);
  printf("# model: layers %d dmodel %d heads %d seq %d, %zu params (%.1f MiB of fp32 gradients)\n", c->layers,
         c->dmodel, c->heads, c->seq, m->lay.total, m->lay.total * 4.0 / (1024 * 1024));
  printf("# batch %d per rank x accum %d x %d ranks = %d sequences (%d tokens) per step\n", d->base.o.batch,
         d->f.accum, d->nranks, d->G, d->G * c->seq);
  printf("# %d buckets (cap %.3g MiB, first %.3g MiB), all-reduce %s the backward:", d->red.nbuckets,
         d->f.bucket_mb, d->f.first_bucket_mb, d->f.no_overlap ? "AFTER" : "overlapped with");
  for (int i = 0; i < d->red.nbuckets && i < 12; i++)
    printf(" %.2f", (d->red.buckets[i].hi - d->red.buckets[i].lo) * 4.0 / (1024 * 1024));
  printf("%s MiB\n", d->red.nbuckets > 12 ? " ..." : "");
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

/* Runs the steps; rank 0 prints and logs. */
static int train(ddp *d, totals *tot) {
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
    tot->step_s[tot->steps++] = dt;
    tot->s += dt;
    tot->s_after_first += i > 0 ? dt : 0.0;
    tot->comm_s += s.comm_s;
    tot->exposed_s += s.exposed_s;
    tot->peak_mib = s.peak_mib;
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

static void summary(const ddp *d, const totals *t) {
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
  printf("# peak memory %.1f MiB per rank; final val_loss %.6f\n", t->peak_mib, t->last_val);
}

/* Bit-identical replicas are DDP's invariant: compare a checksum of the parameters. */
static int check_replicas(ddp *d) {
  const gpt_model *m = d->base.m;
  double sum = 0.0;
  for (size_t i = 0; i < m->lay.total; i++) sum += m->params[i] * (double)(1 + i % 7);
  double lo = sum, hi = sum;
  weft_status_t st = weft_all_reduce(&lo, &lo, 1, WEFT_FLOAT64, WEFT_MIN, d->comm, NULL);
  if (st == WEFT_SUCCESS) st = weft_all_reduce(&hi, &hi, 1, WEFT_FLOAT64, WEFT_MAX, d->comm, NULL);
  if (st != WEFT_SUCCESS) return comm_fail(d, "replica check", st);
  if (lo != hi) {
    fprintf(stderr, "weft-train-ddp: rank %d: replicas diverged: parameter checksums %.17g .. %.17g\n",
            d->rank, lo, hi);
    return -1;
  }
  if (d->rank == 0)
    printf("# replicas identical on all %d ranks (parameter checksum %.17g)\n", d->nranks, lo);
  return 0;
}

static int finish(ddp *d, const totals *t, char *err, size_t errlen) {
  if (check_replicas(d)) return -1;
  if (d->rank != 0) return 0;
  summary(d, t);
  if (d->f.save) {
    if (gpt_run_save(&d->base, d->f.save, err, errlen)) return -1;
    printf("# saved %s at step %ld\n", d->f.save, d->base.st.step);
  }
  if (d->log && d->f.plot && strcmp(d->f.plot, "none")) {
    char title[128], msg[512];
    snprintf(title, sizeof(title), "weft-train-ddp, %d ranks, %d tokens/step", d->nranks,
             d->G * d->base.m->cfg.seq);
    fclose(d->log);
    d->log = NULL;
    gpt_plot_loss(d->f.log, d->f.plot, title, msg, sizeof(msg));
    printf("# log %s; %s\n", d->f.log, msg);
  }
  return 0;
}

static void teardown(ddp *d) {
  if (d->red.buckets) ddp_reducer_free(&d->red);
  if (d->log) fclose(d->log);
  gpt_run_free(&d->base);
  free(d->gx);
  free(d->gy);
  if (d->comm) weft_comm_destroy(d->comm);
}

int main(int argc, char **argv) {
  static ddp d;
  d.f = (ddp_flags){.run = gpt_run_defaults(),
                    .steps = 100,
                    .seed = 1,
                    .accum = 1,
                    .bucket_mb = 25.0f,
                    .first_bucket_mb = 1.0f,
                    .log = "weft-train-ddp.csv",
                    .plot = "weft-train-ddp.png"};
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
    if (err[0]) fprintf(stderr, "weft-train-ddp: rank %d: %s\n", d.rank, err);
    return 1;
  }
  teardown(&d);
  free(t.step_s);
  return 0;
}

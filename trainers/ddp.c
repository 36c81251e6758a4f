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
 * --sync-only keeps every call but all-reduces one value per bucket: what the same steps
 * cost when only the synchronization remains: the ceiling of the scaling that `make
 * bench-trainers` measures beside each multi-rank run (the replicas diverge; not for training).
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

#include "trainers/blas_core.h"
#include "trainers/ddp_elastic.h"
#include "trainers/ddp_reducer.h"
#include "trainers/dp_batch.h"

#define PROG "weft-train-ddp"

typedef struct ddp_flags {
  gpt_trainer_flags c; /* c.run.batch is the per-rank micro-batch */
  int accum, no_overlap, no_register, sync_only;
  float bucket_mb, first_bucket_mb;
  gpt_elastic elastic; /* --elastic, --elastic-batch */
} ddp_flags;

typedef struct ddp {
  ddp_flags f;
  gpt_dp dp; /* data, model, AdamW state, global batch, job, report */
  ddp_reducer red;
  weft_reg_t grads_reg; /* the gradients' registration with the communicator, or NULL
                          (--no-register) */
  long calls;          /* step calls so far, for where the survivors resume (ddp_elastic.h) */
} ddp;

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
          "  --no-register      leave the gradients unregistered (default: registered with\n"
          "                     weft_comm_register, so buckets all-reduce directly between ranks of a host)\n"
          "  --sync-only        all-reduce one value per bucket instead of its gradients: the same steps and\n"
          "                     synchronization with no gradient bytes; the replicas diverge (what\n"
          "                     synchronous steps alone cost: make bench-trainers' scaling ceiling)\n"
          "  --lr X --wd X --clip X --seed N   as weft-train (3e-4 0.1 1.0 1)\n"
          "  --eval-every K     validation loss every K steps, 0 = only at the end (0)\n"
          "  --eval-batches N   validation batches (of N*accum*B sequences) per evaluation (8)\n"
          "  --peak-gflops X    per-rank peak for MFU; 0 = measure at start-up (0)\n"
          "  --log CSV          per-step log (weft-train-ddp.csv; \"none\" = no log)\n"
          "  --plot PNG         loss plot from the log (weft-train-ddp.png; \"none\" = no plot)\n"
          "  --save CKPT        rank 0 writes a single-file weft-train checkpoint at the end\n"
          "  --elastic          when a rank dies mid-step, the survivors shrink the communicator, drop\n"
          "                     the failed step and go on with fewer ranks (default: stop)\n"
          "  --elastic-batch M  after a loss: per-rank (keep each rank's batch; the global batch\n"
          "                     shrinks, default) or global (keep the global batch: more micro-steps)\n");
  gpt_trainer_ckpt_usage(f, 18);
}

static int parse(int argc, char **argv, ddp_flags *f) {
  const gpt_flag own[] = {
      {"accum", GPT_FLAG_INT, &f->accum, 1, 65536},
      {"bucket-mb", GPT_FLAG_FLOAT, &f->bucket_mb, 0, 0},
      {"first-bucket-mb", GPT_FLAG_FLOAT, &f->first_bucket_mb, 0, 0},
      {"no-overlap", GPT_FLAG_SWITCH, &f->no_overlap, 0, 0},
      {"no-register", GPT_FLAG_SWITCH, &f->no_register, 0, 0},
      {"sync-only", GPT_FLAG_SWITCH, &f->sync_only, 0, 0},
      {"elastic", GPT_FLAG_SWITCH, &f->elastic.on, 0, 0},
      {"elastic-batch", GPT_FLAG_STR, &f->elastic.batch, 0, 0},
  };
  return gpt_trainer_parse(PROG, argc, argv, &f->c, GPT_FLAGS_CHECKPOINT | GPT_FLAGS_SAVE | GPT_FLAGS_LOG, own,
                           (int)(sizeof(own) / sizeof(own[0])), usage);
}

/* The last micro-step's backward, unit by unit (gpt_backward's order), handing each
 * finished unit's gradients to the reducer. */
static weft_status_t backward_overlapped(ddp *d) {
  gpt_model *m = d->dp.base.m;
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
  gpt_model *m = d->dp.base.m;
  int b = d->dp.base.o.batch, T = m->cfg.seq, K = d->f.accum;
  gpt_dp_draw(&d->dp);
  gpt_zero_grad(m);
  ddp_reducer_begin(&d->red);
  *loss = 0.0;
  weft_status_t st = WEFT_SUCCESS;
  for (int k = 0; k < K; k++) {
    size_t off = gpt_dp_slice(&d->dp, k);
    gpt_forward(m, d->dp.gx + off, d->dp.gy + off, b, T);
    *loss += m->loss / K;
    if (k < K - 1 || d->f.no_overlap) gpt_backward(m);
    if (k == K - 1) st = d->f.no_overlap ? ddp_reducer_ready_from(&d->red, 0) : backward_overlapped(d);
  }
  if (st != WEFT_SUCCESS) return gpt_dist_fail(&d->dp.dist, "gradient all-reduce (enqueue)", st);
  st = ddp_reducer_wait(&d->red, exposed_s, comm_s);
  return st == WEFT_SUCCESS ? 0 : gpt_dist_fail(&d->dp.dist, "gradient all-reduce", st);
}

enum { STEP_FAILED_BEFORE_UPDATE = 1, STEP_FAILED_AFTER_UPDATE = 2 };

/* One optimizer step on the averaged gradients. They hold the SUM of the K micro-batch
 * means, so the norm and the update divide by K. Every rank holds bit-identical averaged
 * gradients, so every rank computes the same norm and the same update. 0, or where it
 * failed: before its update (in the gradient all-reduce) or after (in the statistics). */
static int try_step(ddp *d, gpt_step_stats *s) {
  gpt_model *m = d->dp.base.m;
  double loss, exposed_s, comm_s, K = d->f.accum;
  if (micro_steps(d, &loss, &exposed_s, &comm_s)) return STEP_FAILED_BEFORE_UPDATE;
  double sumsq = gpt_grad_sumsq(m->grads, m->lay.total) / (K * K);
  s->gnorm = (float)sqrt(sumsq);
  float scale = gpt_clip_factor(sumsq, d->dp.base.o.clip) / (float)K;
  d->dp.base.st.step++;
  gpt_adamw_update(&d->dp.base.o.opt, d->dp.base.st.step, &m->lay, 0, m->lay.total, m->params, m->grads,
                   d->dp.base.st.adam_m, d->dp.base.st.adam_v, scale);
  double v[4] = {loss, comm_s, exposed_s, gpt_peak_rss_mib()};
  /* This rank's own figures, kept if the average fails after the others finished it. */
  *s = (gpt_step_stats){.loss = v[0], .comm_s = v[1], .exposed_s = v[2], .peak_mib = v[3], .gnorm = s->gnorm};
  if (gpt_elastic_fault(&d->f.elastic, &d->dp, "update")) return STEP_FAILED_AFTER_UPDATE;
  if (gpt_dist_average(&d->dp.dist, v, 4, "step statistics")) return STEP_FAILED_AFTER_UPDATE;
  if (gpt_elastic_fault(&d->f.elastic, &d->dp, "statistics")) return STEP_FAILED_AFTER_UPDATE;
  /* loss is now the global batch's loss */
  *s = (gpt_step_stats){.loss = v[0], .comm_s = v[1], .exposed_s = v[2], .peak_mib = v[3], .gnorm = s->gnorm};
  return 0;
}

static int register_grads(ddp *d, char *err, size_t errlen);

/* The buckets over the model's gradients, on the current communicator. */
static int reducer_init(ddp *d, char *err, size_t errlen) {
  size_t mib = 1024 * 1024;
  gpt_model *m = d->dp.base.m;
  if (ddp_reducer_init(&d->red, &m->lay, m->grads, (size_t)(d->f.bucket_mb * mib),
                       (size_t)(d->f.first_bucket_mb * mib), d->dp.dist.comm, err, errlen))
    return -1;
  d->red.sync_only = d->f.sync_only;
  return 0;
}

/* --elastic: after a failed step, what lived on the old communicator goes (the reducer's
 * stream calls end at once: the shrink revokes it), the survivors shrink, and the window
 * and the reducer are rebuilt on the new one. */
static int recover(ddp *d, const char *during, long *at) {
  char err[1024] = "";
  double exposed, comm;
  ddp_reducer_wait(&d->red, &exposed, &comm); /* drains the stream; its error is known */
  ddp_reducer_free(&d->red);
  int rc = gpt_elastic_recover(&d->f.elastic, &d->dp, &d->f.accum, during, at, err, sizeof(err));
  if (rc == 0 && !d->f.no_register) rc = register_grads(d, err, sizeof(err));
  if (rc == 0) rc = reducer_init(d, err, sizeof(err));
  if (rc) fprintf(stderr, "%s: rank %d: %s\n", PROG, d->dp.dist.rank, err);
  return rc;
}

/* One optimizer step; with --elastic a step that failed because a rank died is dropped and
 * run again, with the next batch, on the ranks left. It is done, with this rank's own
 * statistics, when the others had finished it (only this rank's statistics average
 * failed), or when the state every survivor took from the new rank 0 holds its update (the
 * rank died in the statistics average, after every update: running it again would apply
 * a second update and end one step late; test_elastic's rank_dies_after_every_update). */
static int step(void *self, gpt_step_stats *s) {
  ddp *d = self;
  long here = gpt_elastic_step_at(++d->calls), before = d->dp.base.st.step;
  int failed;
  while ((failed = try_step(d, s)) != 0) {
    long at = here;
    if (!d->f.elastic.on ||
        recover(d, failed == STEP_FAILED_AFTER_UPDATE ? "statistics average" : NULL, &at))
      return -1;
    if (at > here || d->dp.base.st.step > before) return 0;
  }
  gpt_elastic_step_done(&d->f.elastic, &d->dp);
  return 0;
}

static int eval_loss(void *ctx, const int *x, const int *y, int b, int T, double *loss) {
  *loss = gpt_eval_loss(((ddp *)ctx)->dp.base.m, x, y, b, T);
  return 0;
}

/* Validation loss (the windows weft-train --batch G scores, dp_batch.h); with --elastic a
 * rank lost during it is dropped and the survivors score again. */
static int eval(void *self, double *val) {
  ddp *d = self;
  long here = gpt_elastic_validation_at(d->calls);
  while (gpt_dp_eval(&d->dp, eval_loss, self, val) || gpt_elastic_fault(&d->f.elastic, &d->dp, "validation")) {
    long at = here;
    if (!d->f.elastic.on || recover(d, "validation", &at)) return -1;
    if (at > here) { /* the others finished it and went on; its value went with the lost rank */
      *val = NAN;
      return 0;
    }
  }
  return 0;
}

/* Registers the gradients (the model's own memory) with the communicator, as every rank
 * does (weft_comm_register: local, as NCCL's ncclCommRegister), so the bucket all-reduces,
 * in place on slices of them, run weft's direct algorithm on one host: each rank averages
 * its share of a bucket straight from its peers' gradients. Again on the communicator an
 * elastic shrink made: the old one took its registration with it. */
static int register_grads(ddp *d, char *err, size_t errlen) {
  gpt_model *m = d->dp.base.m;
  weft_status_t st = weft_comm_register(d->dp.dist.comm, m->grads, m->lay.total * sizeof(float), &d->grads_reg);
  if (st != WEFT_SUCCESS) {
    snprintf(err, errlen, "registering the gradients: %s", weft_get_last_error(d->dp.dist.comm));
    return -1;
  }
  return 0;
}

static int setup(void *self, char *err, size_t errlen) {
  ddp *d = self;
  if (gpt_elastic_check(&d->f.elastic, d->f.c.run.batch, err, errlen)) return -1;
  if (gpt_dp_init(&d->dp, PROG, &d->f.c, d->f.accum, err, errlen)) return -1;
  /* Replicas start from rank 0's parameters, as DDP's constructor broadcasts them. */
  gpt_model *m = d->dp.base.m;
  weft_status_t st = weft_broadcast(m->params, m->params, m->lay.total, WEFT_FLOAT32, 0, d->dp.dist.comm, NULL);
  if (st != WEFT_SUCCESS) {
    snprintf(err, errlen, "broadcast of the initial parameters: %s", weft_get_last_error(d->dp.dist.comm));
    return -1;
  }
  if (!d->f.no_register && register_grads(d, err, errlen)) return -1;
  if (reducer_init(d, err, errlen)) return -1;
  return gpt_dp_measure_peak(&d->dp, d->f.c.peak_gflops, err, errlen);
}

static void print_header(const void *self) {
  const ddp *d = self;
  const gpt_config *c = &d->dp.base.m->cfg;
  const gpt_model *m = d->dp.base.m;
  gpt_report_title(&d->dp.rep, PROG, d->dp.base.o.data, c->vocab);
  printf("# model: layers %d dmodel %d heads %d seq %d, %zu params (%.1f MiB of fp32 gradients)\n", c->layers,
         c->dmodel, c->heads, c->seq, m->lay.total, m->lay.total * 4.0 / (1024 * 1024));
  gpt_dp_print_batch(&d->dp);
  printf("# %d buckets (cap %.3g MiB, first %.3g MiB), all-reduce %s the backward:", d->red.nbuckets,
         d->f.bucket_mb, d->f.first_bucket_mb, d->f.no_overlap ? "AFTER" : "overlapped with");
  for (int i = 0; i < d->red.nbuckets && i < 12; i++)
    printf(" %.2f", (d->red.buckets[i].hi - d->red.buckets[i].lo) * 4.0 / (1024 * 1024));
  printf("%s MiB%s\n", d->red.nbuckets > 12 ? " ..." : "",
         d->f.sync_only ? " (--sync-only: one value of each all-reduced, the replicas diverge)" : "");
  gpt_report_peak(&d->dp.rep, 1, "", "; times are means over ranks");
  gpt_report_columns("", "");
}

/* Replicas are identical, so rank r writes the r-th of N equal slices of the state. */
static int save(void *self, char *err, size_t errlen) {
  ddp *d = self;
  gpt_run *r = &d->dp.base;
  size_t total = r->m->lay.total, N = (size_t)d->dp.dist.nranks, chunk = (total + N - 1) / N;
  size_t lo = (size_t)d->dp.dist.rank * chunk < total ? (size_t)d->dp.dist.rank * chunk : total;
  size_t hi = lo + chunk < total ? lo + chunk : total;
  gpt_ckpt_seg seg = {lo, lo, hi - lo};
  gpt_ckpt_local own = {{r->m->params, r->st.adam_m, r->st.adam_v}, &seg, 1};
  return gpt_dp_save(&d->dp, PROG, &own, err, errlen);
}

/* Runs the steps; rank 0 prints and logs. */
static int train(void *self, char *err, size_t errlen) {
  ddp *d = self;
  return gpt_run_steps(&(gpt_steps){.self = d, .flags = &d->f.c, .rep = &d->dp.rep, .step = &d->dp.base.st.step,
                                    .step_fn = step, .eval = eval, .ckpt = &d->dp.ckpt, .save = save},
                       err, errlen);
}

static void summary(const ddp *d) {
  if (d->dp.rep.tot.steps == 0) return;
  gpt_report_throughput(&d->dp.rep, NULL);
  gpt_report_comm(&d->dp.rep);
  char val[32];
  printf("# peak memory %.1f MiB per rank; final val_loss %s\n", d->dp.rep.tot.peak_mib,
         gpt_report_val_text(d->dp.rep.tot.last_val, val, sizeof(val)));
}

/* Bit-identical replicas are DDP's invariant: compare a checksum of the parameters. */
static int check_replicas(ddp *d) {
  const gpt_model *m = d->dp.base.m;
  double sum = 0.0;
  for (size_t i = 0; i < m->lay.total; i++) sum += m->params[i] * (double)(1 + i % 7);
  double lo = sum, hi = sum;
  weft_status_t st = weft_all_reduce(&lo, &lo, 1, WEFT_FLOAT64, WEFT_MIN, d->dp.dist.comm, NULL);
  if (st == WEFT_SUCCESS) st = weft_all_reduce(&hi, &hi, 1, WEFT_FLOAT64, WEFT_MAX, d->dp.dist.comm, NULL);
  if (st != WEFT_SUCCESS) return gpt_dist_fail(&d->dp.dist, "replica check", st);
  if (lo != hi) {
    fprintf(stderr, "weft-train-ddp: rank %d: replicas diverged: parameter checksums %.17g .. %.17g\n",
            d->dp.dist.rank, lo, hi);
    return -1;
  }
  if (d->dp.dist.rank == 0)
    printf("# replicas identical on all %d ranks (parameter checksum %.17g)\n", d->dp.dist.nranks, lo);
  return 0;
}

static int finish(void *self, char *err, size_t errlen) {
  ddp *d = self;
  if (d->f.sync_only) {
    if (d->dp.dist.rank == 0) printf("# replicas not compared (--sync-only: the gradients were not averaged)\n");
  } else if (check_replicas(d)) {
    return -1;
  }
  if (d->dp.dist.rank != 0) return 0;
  summary(d);
  if (d->f.c.save) {
    if (gpt_run_save(&d->dp.base, d->f.c.save, err, errlen)) return -1;
    printf("# saved %s at step %ld\n", d->f.c.save, d->dp.base.st.step);
  }
  gpt_dp_plot(&d->dp, PROG, &d->f.c);
  return 0;
}

static void teardown(void *self) {
  ddp *d = self;
  if (d->red.buckets) ddp_reducer_free(&d->red);
  /* Before the gradients go: registration put their pages in shared memory; this gives
   * private ones back (a communicator an elastic shrink replaced took its own with it). */
  if (d->grads_reg && d->dp.dist.comm) weft_comm_deregister(d->dp.dist.comm, d->grads_reg);
  gpt_dp_free(&d->dp);
}

int main(int argc, char **argv) {
  gpt_blas_choose(argv); /* first: it may re-execute the program (blas_core.h) */
  static ddp d;
  d.f = (ddp_flags){.c = gpt_trainer_defaults(PROG ".csv", PROG ".png"),
                    .accum = 1,
                    .bucket_mb = 25.0f,
                    .first_bucket_mb = 1.0f};
  if (parse(argc, argv, &d.f)) return 2;
  return gpt_program_run(&(gpt_program){.prog = PROG, .self = &d, .dist = &d.dp.dist, .rep = &d.dp.rep, .flags = &d.f.c,
                                        .err_names_rank = 1, .ckpt = &d.dp.ckpt, .setup = setup, .header = print_header,
                                        .train = train, .finish = finish, .teardown = teardown});
}

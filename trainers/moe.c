/* trainers/moe.c: weft-train-moe, expert-parallel training of a mixture-of-experts GPT
 * (weft issue 6).
 *
 *   ./weftrun -n 2 ./weft-train-moe --data ../shared/data/tinyshakespeare.txt --layers 4 \
 *       --dmodel 256 --heads 4 --seq 128 --batch 16 --experts 4 --topk 2 --steps 30
 *
 * Every block's MLP is a MoE layer of --experts GELU experts (moe_model.h, moe_layer.h),
 * rank r owning experts [r E/N, (r+1) E/N) of every layer; tokens reach their experts and
 * come back through weft_all_to_allv, forward and backward. Everything else is replicated
 * (no broadcast: the initialisation is deterministic from --seed, the same on every rank
 * and for every rank count, experts included); replicated gradients are averaged with one weft_all_reduce
 * (WEFT_AVG) after the backward, expert gradients stay on their owner. The gradient norm
 * for clipping adds the replicated part once and the experts' parts of every rank.
 *
 * Data as weft-train-ddp: one global batch of N * B windows per step from the shared batch
 * RNG, rank r taking windows [r B, (r+1) B). Each rank is one capacity group; a single
 * process with --groups N and --batch N*B routes, computes and updates exactly as N ranks
 * (trainers/test_moe.c checks it).
 *
 * MFU counts ACTIVE parameters only: FLOPs/token = 6 N_active + 12 L H Q T, PaLM
 * (Chowdhery et al. 2022) appendix B, with N_active = the non-embedding parameters a token
 * passes through: attention, LayerNorms, router, and k of the E experts of each layer
 * (Switch Transformer, Fedus et al. 2021, compares models by FLOPs per token this way;
 * dropped tokens and padding are not subtracted).
 *
 * Output (rank 0): one line per step (cross-entropy, aux loss, gradient norm, ms,
 * tokens/s, MFU, comm time and the part exposed, peak memory; averaged over ranks), the
 * per-expert load (routed/kept/dropped assignments, summed over ranks) every --load-every
 * steps, a summary, the CSV log (--log) and the loss plot (--plot). By default every
 * exchange is a blocking call, so exposed comm equals comm. With --overlap they run on one
 * weft stream (comm_stream.h) and the backward's two overlap compute (moe_layer.h says
 * which); the forward's exchanges and the gradient all-reduce after the backward have
 * nothing to overlap. Not the default: with one core per rank (this project's 2-core VM)
 * the stream's thread copies on the core the GEMMs need, and the peer's half of each
 * pipelined transfer stalls while it is descheduled: 2 ranks, 5 alternating launches of 20
 * steps, median step 839 ms overlapped against 758 blocking (exposed 76-115 against 91-100
 * ms/step).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft.h>

#include "trainers/adamw.h"
#include "trainers/blas_core.h"
#include "trainers/comm_stream.h"
#include "trainers/data.h"
#include "trainers/moe_ckpt.h"
#include "trainers/moe_model.h"
#include "trainers/trainer_main.h"

#define PROG "weft-train-moe"

/* The batch RNG's salt, as loop.c's, so --experts aside the windows are weft-train's. */
#define BATCH_SEED_SALT 0x62617463685f726eull

typedef struct moe_flags {
  gpt_trainer_flags c; /* c.run: data, model, batch per rank, AdamW, clip, eval batches */
  moe_config mc;
  moe_given given; /* model flags given, checked against a resumed checkpoint */
  const char *dump;
  int groups, load_every, overlap;
} moe_flags;

typedef struct moe_trainer {
  moe_flags f;
  gpt_dataset ds;
  moe_model *m;
  gpt_dist dist;
  gpt_comm_stream cs; /* the exchanges' stream (--overlap, more than one rank) */
  int G; /* global batch in sequences */
  int *gx, *gy;
  float *adam_m, *adam_v;
  gpt_rng rng;
  long step;
  gpt_report rep; /* peak (averaged over ranks), log, totals */
  char resume[4200];         /* the checkpoint --resume resolved to on rank 0 */
  gpt_ckpt_origin from;      /* and what it was */
  gpt_ckpt_model from_model; /* its model, for the routing note */
  gpt_ckpt_track ckpt;       /* --checkpoint-dir: when to save, the last complete checkpoint */
  gpt_ckpt_seg *own, *need;  /* this rank's part of the full layout, written / read (moe_ckpt.h) */
  int nown, nneed;
} moe_trainer;

static void usage(FILE *f) {
  fprintf(f,
          "usage: weftrun -n N weft-train-moe --data PATH [options]\n"
          "  --data PATH          training text (e.g. ../shared/data/tinyshakespeare.txt)\n"
          "  --steps N            optimizer steps (default 100)\n"
          "  --layers L --dmodel D --heads H --seq T   model (4 128 4 64)\n"
          "  --batch B            sequences per rank (16); global batch N*B\n"
          "  --experts E          experts per layer, a multiple of N (4)\n"
          "  --topk K             experts per token, 1 (Switch) or 2 (GShard, renormalised) (1)\n"
          "  --expert-hidden H    expert hidden width (4*D)\n"
          "  --capacity-factor X  slots per (group, expert) = ceil(X * K * tokens_per_group / E) (1.25)\n"
          "  --aux-alpha X        load-balancing loss weight (0.01)\n"
          "  --groups G           capacity groups per process (1); 1 process with --groups N\n"
          "                       and --batch N*B reproduces N ranks with --batch B\n"
          "  --load-every K       print per-expert load every K steps (10; 0 = only the last)\n"
          "  --overlap            run the exchanges on a stream, the backward's two overlapping\n"
          "                       its compute (needs a spare core per rank to pay: see README)\n"
          "  --lr X --wd X --clip X --seed N   as weft-train (3e-4 0.1 1.0 1)\n"
          "  --eval-every K       validation loss every K steps, 0 = only at the end (0)\n"
          "  --eval-batches N     validation batches (of N*B sequences) per evaluation (8)\n"
          "  --peak-gflops X      per-rank peak for MFU; 0 = measure at start-up (0)\n"
          "  --log CSV            per-step log (weft-train-moe.csv; \"none\" = no log)\n"
          "  --plot PNG           loss plot from the log (weft-train-moe.png; \"none\" = no plot)\n"
          "  --dump-params FILE   rank 0 writes every parameter (all experts, 1-process layout) as\n"
          "                       raw float32 at the end\n");
  gpt_trainer_ckpt_usage(f, 20);
  fprintf(f, "                       (sharded checkpoints only; the experts must split over the ranks)\n");
}

static int parse(int argc, char **argv, moe_flags *f) {
  const gpt_flag own[] = {
      {"dump-params", GPT_FLAG_STR, &f->dump, 0, 0},
      {"experts", GPT_FLAG_INT, &f->mc.experts, 1, 4096}, /* 0 until given: 4 */
      {"topk", GPT_FLAG_INT, &f->mc.topk, 1, 2},
      {"expert-hidden", GPT_FLAG_INT, &f->mc.hidden, 0, 1 << 20},
      {"groups", GPT_FLAG_INT, &f->groups, 1, 65536},
      {"load-every", GPT_FLAG_INT, &f->load_every, 0, 100000000},
      {"overlap", GPT_FLAG_SWITCH, &f->overlap, 0, 0},
      {"capacity-factor", GPT_FLAG_FLOAT, &f->mc.capacity_factor, 0, 0},
      {"aux-alpha", GPT_FLAG_FLOAT, &f->mc.aux_alpha, 0, 0},
  };
  if (gpt_trainer_parse(PROG, argc, argv, &f->c, GPT_FLAGS_CHECKPOINT | GPT_FLAGS_LOG, own,
                        (int)(sizeof(own) / sizeof(own[0])), usage))
    return -1;
  f->given = (moe_given){.model = f->c.run.given, .experts = f->mc.experts, .hidden = f->mc.hidden};
  if (f->mc.experts == 0) f->mc.experts = 4;
  f->mc.dmodel = f->c.run.model.dmodel;
  if (f->mc.hidden == 0) f->mc.hidden = 4 * f->c.run.model.dmodel;
  return 0;
}

/* In place over ranks (blocking); counted as communication time when comm_s is given. */
static int reduce(moe_trainer *t, void *v, size_t n, weft_datatype_t type, weft_redop_t op, const char *what,
                  double *comm_s) {
  if (t->dist.nranks == 1) return 0; /* every reduction over one rank is the identity */
  double t0 = gpt_now_s();
  int rc = gpt_dist_reduce(&t->dist, v, n, type, op, what);
  if (comm_s) *comm_s += gpt_now_s() - t0;
  return rc;
}

static int model_fail(const moe_trainer *t, const char *phase, weft_status_t st) {
  char what[160];
  snprintf(what, sizeof(what), "%s: %s", phase, t->m->ex.failed ? t->m->ex.failed : "exchange");
  return gpt_dist_fail(&t->dist, what, st);
}

/* Forward and backward of this rank's B windows of a fresh global batch. */
static int forward_backward(moe_trainer *t, gpt_step_stats *s) {
  moe_model *m = t->m;
  int B = t->f.c.run.batch, T = t->f.c.run.model.seq;
  gpt_batch_random(t->ds.train, t->ds.ntrain, t->G, T, &t->rng, t->gx, t->gy);
  size_t off = (size_t)t->dist.rank * B * T;
  memset(m->grads, 0, m->lay.total * sizeof(float));
  m->ex.comm_s = 0.0;
  if (m->ex.cs != NULL) { /* drop what evaluations since the last step spent */
    double busy, exposed;
    gpt_comm_stream_take_times(m->ex.cs, &busy, &exposed);
  }
  weft_status_t st = moe_model_forward(m, t->gx + off, t->gy + off, B, T);
  if (st != WEFT_SUCCESS) return model_fail(t, "forward", st);
  st = moe_model_backward(m);
  if (st != WEFT_SUCCESS) return model_fail(t, "backward", st);
  s->loss = m->ce;
  s->aux = m->aux;
  s->comm_s = s->exposed_s = m->ex.comm_s; /* blocking exchanges: all exposed */
  if (m->ex.cs != NULL) {
    double busy, exposed;
    gpt_comm_stream_take_times(m->ex.cs, &busy, &exposed);
    s->comm_s += busy;
    s->exposed_s += exposed;
  }
  return 0;
}

/* Replicated gradients averaged; the norm adds the replicated sum of squares once and
 * every rank's experts'. Then AdamW on everything this rank holds. */
static int step(void *self, gpt_step_stats *s) {
  moe_trainer *t = self;
  moe_model *m = t->m;
  for (int l = 0; l < m->layers; l++) {
    memset(m->moe[l].stat_routed, 0, (size_t)m->mc.experts * sizeof(long));
    memset(m->moe[l].stat_kept, 0, (size_t)m->mc.experts * sizeof(long));
  }
  if (forward_backward(t, s)) return -1;
  double blocking = 0.0;
  if (reduce(t, m->grads, m->rep_total, WEFT_FLOAT32, WEFT_AVG, "replicated gradient all-reduce", &blocking))
    return -1;
  double experts = gpt_grad_sumsq(m->grads + m->rep_total, m->lay.total - m->rep_total);
  if (reduce(t, &experts, 1, WEFT_FLOAT64, WEFT_SUM, "expert gradient norm", &blocking)) return -1;
  s->comm_s += blocking;
  s->exposed_s += blocking;
  double sumsq = gpt_grad_sumsq(m->grads, m->rep_total) + experts;
  s->gnorm = (float)sqrt(sumsq);
  t->step++;
  gpt_adamw_update(&t->f.c.run.opt, t->step, &m->lay, 0, m->lay.total, m->params, m->grads, t->adam_m, t->adam_v,
                   gpt_clip_factor(sumsq, t->f.c.run.clip));
  double v[5] = {s->loss, s->aux, s->comm_s, s->exposed_s, gpt_peak_rss_mib()};
  if (reduce(t, v, 5, WEFT_FLOAT64, WEFT_AVG, "step statistics", NULL)) return -1;
  s->loss = v[0];
  s->aux = v[1];
  s->comm_s = v[2];
  s->exposed_s = v[3];
  s->peak_mib = v[4];
  return 0;
}

/* Mean cross-entropy over eval_batches global batches, each rank scoring its windows. */
static int eval(void *self, double *val) {
  moe_trainer *t = self;
  int B = t->f.c.run.batch, T = t->f.c.run.model.seq, n = t->f.c.run.eval_batches;
  double sum = 0.0;
  for (int i = 0; i < n; i++) {
    size_t first = (size_t)i * t->G + (size_t)t->dist.rank * B;
    gpt_batch_fixed(t->ds.val, t->ds.nval, B, T, first, t->gx, t->gy);
    weft_status_t st = moe_model_forward(t->m, t->gx, t->gy, B, T);
    if (st != WEFT_SUCCESS) return model_fail(t, "validation forward", st);
    sum += t->m->ce;
  }
  *val = sum / (n > 0 ? n : 1);
  return reduce(t, val, 1, WEFT_FLOAT64, WEFT_AVG, "validation loss", NULL);
}

/* Routed and kept assignments of the last step per layer and expert, summed over ranks;
 * rank 0 prints them as routed/kept/dropped. */
static int print_load(moe_trainer *t) {
  moe_model *m = t->m;
  int L = m->layers, E = m->mc.experts;
  int64_t *c = calloc((size_t)L * E * 2, sizeof(int64_t));
  if (!c) return gpt_dist_fail(&t->dist, "per-expert load", WEFT_ERR_NO_MEMORY);
  for (int l = 0; l < L; l++)
    for (int e = 0; e < E; e++) {
      c[(l * E + e) * 2] = m->moe[l].stat_routed[e];
      c[(l * E + e) * 2 + 1] = m->moe[l].stat_kept[e];
    }
  int rc = reduce(t, c, (size_t)L * E * 2, WEFT_INT64, WEFT_SUM, "per-expert load", NULL);
  if (rc == 0 && t->dist.rank == 0) {
    printf("# load at step %ld: routed/kept/dropped per expert (%d groups, capacity %d per group and expert)\n",
           t->step, t->dist.nranks * t->f.groups, m->moe[0].capacity);
    for (int l = 0; l < L; l++) {
      printf("#   h%d:", l);
      for (int e = 0; e < E; e++) {
        int64_t r = c[(l * E + e) * 2], k = c[(l * E + e) * 2 + 1];
        printf(" e%d %lld/%lld/%lld", e, (long long)r, (long long)k, (long long)(r - k));
      }
      printf("\n");
    }
  }
  free(c);
  return rc;
}

/* Rank 0 resolves --resume for all; the model's shape then comes from the manifest. */
static int resume_shape(moe_trainer *t, gpt_ckpt_manifest *man, char *err, size_t errlen) {
  gpt_ckpt_group g = gpt_dist_ckpt_group(&t->dist);
  int is_file;
  if (gpt_ckpt_resolve_group(&g, t->f.c.run.resume, t->resume, sizeof(t->resume), &is_file, err, errlen)) return -1;
  if (is_file) {
    snprintf(err, errlen, "%s is a single-file dense checkpoint; " PROG " resumes its own sharded checkpoints "
             "(--checkpoint-dir)", t->resume);
    return -1;
  }
  if (gpt_ckpt_manifest_read(t->resume, man, err, errlen)) return -1;
  return moe_ckpt_shape(t->resume, man, &t->ds.tok, &t->f.given, t->dist.nranks, &t->f.c.run.model, &t->f.mc, err,
                        errlen);
}

/* Every rank reads the replicated part and its experts from whichever shards hold them. */
static int resume_state(moe_trainer *t, const gpt_ckpt_manifest *man, char *err, size_t errlen) {
  if (man->model.floats != moe_model_full_size(t->m)) {
    snprintf(err, errlen, "checkpoint %s/manifest: %llu floats, but its model config has %zu", t->resume,
             (unsigned long long)man->model.floats, moe_model_full_size(t->m));
    return -1;
  }
  gpt_ckpt_local need = {{t->m->params, t->adam_m, t->adam_v}, t->need, t->nneed};
  if (gpt_ckpt_load(t->resume, man, &need, err, errlen)) return -1;
  t->step = man->step;
  t->rng = man->rng;
  gpt_ckpt_origin_of(&t->from, t->resume, man);
  t->from_model = man->model;
  return 0;
}

/* The model (from the flags or the checkpoint's shape), its state, the checkpoint maps. */
static int build(moe_trainer *t, char *err, size_t errlen) {
  gpt_ckpt_manifest man = {0};
  int rc = t->f.c.run.resume ? resume_shape(t, &man, err, errlen) : 0;
  t->f.c.run.model.vocab = t->ds.tok.vocab;
  moe_exchange ex = {.comm = t->dist.comm, .rank = t->dist.rank, .nranks = t->dist.nranks};
  if (rc == 0) t->m = moe_model_create(&t->f.c.run.model, &t->f.mc, t->f.c.run.batch, t->f.groups, ex, err, errlen);
  if (!t->m) rc = -1;
  size_t n = rc == 0 ? t->m->lay.total : 0;
  t->adam_m = n ? calloc(n, sizeof(float)) : NULL;
  t->adam_v = n ? calloc(n, sizeof(float)) : NULL;
  t->own = n ? calloc((size_t)t->m->layers + 1, sizeof(gpt_ckpt_seg)) : NULL;
  t->need = n ? calloc((size_t)t->m->layers + 1, sizeof(gpt_ckpt_seg)) : NULL;
  if (rc == 0 && (!t->adam_m || !t->adam_v || !t->own || !t->need))
    rc = -1, snprintf(err, errlen, "out of memory for the optimizer state");
  if (rc == 0) {
    t->nown = moe_ckpt_segments(t->m, t->dist.rank == 0, t->own);
    t->nneed = moe_ckpt_segments(t->m, 1, t->need);
    moe_model_init_params(t->m, (uint64_t)t->f.c.seed);
    gpt_rng_seed(&t->rng, (uint64_t)t->f.c.seed ^ BATCH_SEED_SALT);
  }
  if (rc == 0 && t->f.c.run.resume) rc = resume_state(t, &man, err, errlen);
  gpt_ckpt_manifest_free(&man);
  return rc;
}

static int setup(void *self, char *err, size_t errlen) {
  moe_trainer *t = self;
  if (gpt_dist_join(&t->dist, PROG, "N", err, errlen)) return -1;
  if (gpt_dataset_load(&t->ds, t->f.c.run.data, 0.9, err, errlen) || build(t, err, errlen)) return -1;
  size_t T = (size_t)t->f.c.run.model.seq;
  if (t->ds.nval <= T + 1 || t->ds.ntrain <= T + 1) {
    snprintf(err, errlen, "%s is too short for sequences of %zu tokens", t->f.c.run.data, T);
    return -1;
  }
  const gpt_trainer_flags *f = &t->f.c;
  gpt_ckpt_track_init(&t->ckpt, f->ckpt_dir, f->save_every, f->keep, &t->from, &t->step, f->steps);
  t->G = t->dist.nranks * t->f.c.run.batch;
  t->gx = malloc((size_t)t->G * T * sizeof(int));
  t->gy = malloc((size_t)t->G * T * sizeof(int));
  if (!t->gx || !t->gy) {
    snprintf(err, errlen, "out of memory for the batch");
    return -1;
  }
  if (t->dist.nranks > 1 && t->f.overlap) {
    if (gpt_comm_stream_init(&t->cs, err, errlen)) return -1;
    t->m->ex.cs = &t->cs;
  }
  t->rep.rank = t->dist.rank;
  t->rep.nranks = t->dist.nranks;
  t->rep.flops_per_token = moe_flops_per_token(&t->m->g->cfg, &t->m->mc);
  t->rep.tokens_per_step = (double)t->G * T;
  if (gpt_dist_measure_peak(&t->dist, t->f.c.peak_gflops, &t->rep.peak)) {
    snprintf(err, errlen, "peak measurement failed");
    return -1;
  }
  return 0;
}

static void print_header(const void *self) {
  const moe_trainer *t = self;
  const gpt_config *c = &t->m->g->cfg;
  const moe_config *mc = &t->m->mc;
  const moe_model *m = t->m;
  gpt_report_title(&t->rep, PROG, t->f.c.run.data, c->vocab);
  printf("# model: layers %d dmodel %d heads %d seq %d; %d experts (hidden %d), %d per rank, top-%d (%s), "
         "capacity factor %.3g, aux alpha %.3g\n",
         c->layers, c->dmodel, c->heads, c->seq, mc->experts, mc->hidden, mc->experts / t->dist.nranks, mc->topk,
         mc->topk == 1 ? "Switch gate" : "GShard, renormalised gates", mc->capacity_factor, mc->aux_alpha);
  printf("# params: %zu replicated + %zu experts on this rank (%zu in all); %zu active per token\n", m->rep_total,
         m->lay.total - m->rep_total, moe_model_full_size(m), moe_num_params_active(c, mc));
  printf("# batch %d per rank x %d ranks = %d sequences (%d tokens) per step, %d capacity groups per rank\n",
         t->f.c.run.batch, t->dist.nranks, t->G, t->G * c->seq, t->f.groups);
  gpt_ckpt_print_origin(&t->from, t->G, t->dist.nranks * t->f.groups);
  if (t->from.path[0]) moe_ckpt_print_routing(&t->from_model, mc);
  gpt_report_peak(&t->rep, 0, " (active parameters)", "");
  char aux[16];
  snprintf(aux, sizeof(aux), " %9s", "aux");
  gpt_report_columns(aux, "");
}

/* The load before the evaluation: an evaluation's forwards would add to the routing
 * statistics. */
static int load_due(void *self, long step, int last) {
  moe_trainer *t = self;
  int le = t->f.load_every;
  return ((le > 0 && step % le == 0) || last) ? print_load(t) : 0;
}

/* Rank 0 writes the replicated part and its experts, every other rank its experts. */
static int save(void *self, char *err, size_t errlen) {
  moe_trainer *t = self;
  gpt_ckpt_save_req r = {.root = t->ckpt.root,
                         .keep = t->ckpt.keep,
                         .trainer = PROG,
                         .model = moe_ckpt_model(t->m, &t->ds.tok),
                         .step = t->step,
                         .rng = t->rng,
                         .global_batch = t->G,
                         .groups = t->dist.nranks * t->f.groups,
                         .own = {{t->m->params, t->adam_m, t->adam_v}, t->own, t->nown}};
  return gpt_dist_ckpt_save(&t->dist, &t->ckpt, &r, err, errlen);
}

static int train(void *self, char *err, size_t errlen) {
  moe_trainer *t = self;
  return gpt_run_steps(&(gpt_steps){.self = t, .flags = &t->f.c, .rep = &t->rep, .step = &t->step, .aux_column = 1,
                                    .step_fn = step, .eval = eval, .before_eval = load_due, .ckpt = &t->ckpt,
                                    .save = save},
                       err, errlen);
}

static void summary(const moe_trainer *t) {
  const gpt_totals *tot = &t->rep.tot;
  if (tot->steps == 0) return;
  gpt_report_throughput(&t->rep, "(active parameters)");
  gpt_report_comm(&t->rep);
  char first[32], last[32];
  if (isnan(tot->first_val))
    printf("# peak memory %.1f MiB per rank; val_loss %s\n", tot->peak_mib,
           gpt_report_val_text(tot->last_val, last, sizeof(last)));
  else
    printf("# peak memory %.1f MiB per rank; val_loss %s (first evaluation) -> %s (last)\n", tot->peak_mib,
           gpt_report_val_text(tot->first_val, first, sizeof(first)),
           gpt_report_val_text(tot->last_val, last, sizeof(last)));
}

/* Replicated parameters must stay identical on every rank: compare a checksum. */
static int check_replicas(moe_trainer *t) {
  const moe_model *m = t->m;
  double sum = 0.0;
  for (size_t i = 0; i < m->rep_total; i++)
    sum += m->params[i] * (double)(1 + i % 7);
  double lo = sum, hi = sum;
  if (reduce(t, &lo, 1, WEFT_FLOAT64, WEFT_MIN, "replica check", NULL) ||
      reduce(t, &hi, 1, WEFT_FLOAT64, WEFT_MAX, "replica check", NULL))
    return -1;
  if (lo != hi) {
    fprintf(stderr, "weft-train-moe: rank %d: replicated parameters diverged: checksums %.17g .. %.17g\n",
            t->dist.rank, lo, hi);
    return -1;
  }
  if (t->dist.rank == 0) printf("# replicated parameters identical on all %d ranks (checksum %.17g)\n", t->dist.nranks, lo);
  return 0;
}

static int dump_params(moe_trainer *t, char *err, size_t errlen) {
  size_t n = moe_model_full_size(t->m);
  float *all = t->dist.rank == 0 ? malloc(n * sizeof(float)) : NULL;
  if (t->dist.rank == 0 && !all) {
    snprintf(err, errlen, "out of memory for the parameter dump");
    return -1;
  }
  weft_status_t st = moe_model_gather(t->m, all);
  if (st != WEFT_SUCCESS) {
    free(all);
    return gpt_dist_fail(&t->dist, "gather of the experts for --dump-params", st);
  }
  int rc = 0;
  if (t->dist.rank == 0) {
    FILE *f = fopen(t->f.dump, "wb");
    if (!f || fwrite(all, sizeof(float), n, f) != n) rc = -1;
    if (f && fclose(f)) rc = -1;
    if (rc) snprintf(err, errlen, "cannot write %s", t->f.dump);
  }
  free(all);
  return rc;
}

static int finish(void *self, char *err, size_t errlen) {
  moe_trainer *t = self;
  if (check_replicas(t)) return -1;
  if (t->f.dump && dump_params(t, err, errlen)) return -1;
  if (t->dist.rank != 0) return 0;
  summary(t);
  char title[128];
  snprintf(title, sizeof(title), PROG ", %d ranks, %d experts, top-%d", t->dist.nranks, t->f.mc.experts,
           t->f.mc.topk);
  gpt_report_plot(&t->rep, t->f.c.log, t->f.c.plot, title);
  return 0;
}

static void teardown(void *self) {
  moe_trainer *t = self;
  gpt_report_free(&t->rep);
  moe_model_free(t->m);
  gpt_dataset_free(&t->ds);
  free(t->gx);
  free(t->gy);
  free(t->adam_m);
  free(t->adam_v);
  free(t->own);
  free(t->need);
  if (t->cs.stream) gpt_comm_stream_free(&t->cs);
  if (t->dist.comm) weft_comm_destroy(t->dist.comm);
}

int main(int argc, char **argv) {
  gpt_blas_choose(argv); /* first: it may re-execute the program (blas_core.h) */
  static moe_trainer t;
  t.f = (moe_flags){.c = gpt_trainer_defaults(PROG ".csv", PROG ".png"),
                    .mc = {.topk = 1, .capacity_factor = 1.25f, .aux_alpha = 0.01f},
                    .groups = 1,
                    .load_every = 10};
  if (parse(argc, argv, &t.f)) return 2;
  return gpt_program_run(&(gpt_program){.prog = PROG, .self = &t, .dist = &t.dist, .rep = &t.rep, .flags = &t.f.c,
                                        .err_names_rank = 1, .ckpt = &t.ckpt, .setup = setup, .header = print_header,
                                        .train = train, .finish = finish, .teardown = teardown});
}

/* trainers/train.c: weft-train, single-process training of the reference GPT.
 *
 *   weft-train --data ../shared/data/tinyshakespeare.txt --layers 4 --dmodel 256 --heads 4 \
 *              --seq 128 --batch 16 --steps 30
 *
 * Prints one line per step (loss, gradient norm, ms, tokens/s, GFLOP/s and MFU by the PaLM
 * formula, gpt.h, against the core's peak: measured at start-up as the distributed trainers
 * measure it, metrics.h, or --peak-gflops) and the validation loss every --eval-every
 * steps and at the end. OpenBLAS runs on one thread (backend_cpu.c), so the same flags give
 * the same losses bit for bit; --save writes a checkpoint at the end, --checkpoint-dir DIR
 * one every --save-every steps (ckpt.h: the same sharded format the distributed trainers
 * write, as one shard), --resume continues from either (the model shape then comes from it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainers/blas_core.h"
#include "trainers/loop.h"
#include "trainers/metrics.h"
#include "trainers/trainer_flags.h"
#include "trainers/trainer_report.h"

typedef gpt_trainer_flags train_flags; /* --log and --plot are the distributed trainers' */

static void usage(FILE *f) {
  fprintf(f,
          "usage: weft-train --data PATH [options]\n"
          "  --data PATH        training text (any file; e.g. ../shared/data/tinyshakespeare.txt)\n"
          "  --steps N          optimizer steps (default 100)\n"
          "  --layers L --dmodel D --heads H --seq T --batch B   model and batch (4 128 4 64 16)\n"
          "  --lr X             AdamW learning rate (3e-4)    --wd X  weight decay (0.1)\n"
          "  --clip X           max gradient norm, 0 = off (1.0)\n"
          "  --seed N           initialisation and batch seed (1)\n"
          "  --eval-every K     validation loss every K steps, 0 = only at the end (50)\n"
          "  --eval-batches N   validation batches per evaluation (8)\n"
          "  --save CKPT        write a single-file checkpoint at the end\n"
          "  --peak-gflops X    the core's fp32 peak for the MFU column; 0 = measure at start-up (0)\n");
  gpt_trainer_ckpt_usage(f, 18);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_flags(int argc, char **argv, train_flags *f) {
  return gpt_trainer_parse("weft-train", argc, argv, f, GPT_FLAGS_CHECKPOINT | GPT_FLAGS_SAVE, NULL, 0, usage);
}

/* The header: data, model, then the peak and FLOPs per token as the distributed trainers
 * print them (trainer_report.h), so MFU means the same in every trainer. */
static void print_model(const gpt_run *r, const gpt_peak *peak) {
  const gpt_config *c = &r->m->cfg;
  printf("# weft-train: %s, %zu tokens (train %zu, val %zu), vocab %d\n", r->o.data, r->ds.ntokens,
         r->ds.ntrain, r->ds.nval, c->vocab);
  printf("# model: layers %d dmodel %d heads %d seq %d, %zu params (%zu in matmuls), batch %d\n", c->layers,
         c->dmodel, c->heads, c->seq, r->m->lay.total, gpt_num_params_nonembedding(c), r->o.batch);
  gpt_report rep = {.nranks = 1, .flops_per_token = gpt_flops_per_token(c), .peak = *peak};
  gpt_report_peak(&rep, 1, " (6N + 12LHQT)", "");
  printf("# backend %s, 1 thread\n", r->m->be->name);
  printf("# lr %g wd %g clip %g seed %llu\n", r->o.opt.lr, r->o.opt.weight_decay, r->o.clip,
         (unsigned long long)r->o.seed);
  gpt_ckpt_print_origin(&r->from, r->o.batch, 0);
  printf("%8s %10s %8s %9s %10s %8s %6s\n", "step", "loss", "gnorm", "ms", "tok/s", "GFLOP/s", "MFU");
}

/* One process: a checkpoint of one shard holding the whole state. */
static int save(gpt_run *r, gpt_ckpt_track *t, char *err, size_t errlen) {
  gpt_ckpt_seg whole;
  gpt_ckpt_save_req q = gpt_run_save_req(r, "weft-train", t->root, t->keep, r->o.batch, &whole);
  gpt_ckpt_group one = {.rank = 0, .nranks = 1};
  gpt_ckpt_saved saved;
  if (gpt_ckpt_save(&one, &q, &saved, err, errlen)) return -1;
  gpt_ckpt_saved_note(t, &saved, r->st.step, 0);
  return 0;
}

static int train(gpt_run *r, const train_flags *f, gpt_ckpt_track *ck, char *err, size_t errlen) {
  double fpt = gpt_flops_per_token(&r->m->cfg), tokens = (double)r->o.batch * r->m->cfg.seq;
  double t_all = 0.0;
  int done = 0;
  for (int i = 0; i < f->steps; i++) {
    double t0 = now_s();
    float loss = gpt_run_step(r);
    double dt = now_s() - t0, gflops = fpt * tokens / dt / 1e9;
    t_all += dt;
    done++;
    printf("%8ld %10.6f %8.4f %9.1f %10.0f %8.2f %5.1f%%\n", r->st.step, loss, r->last_norm, dt * 1e3,
           tokens / dt, gflops, 100.0 * gflops / f->peak_gflops);
    if (f->eval_every > 0 && r->st.step % f->eval_every == 0 && r->o.eval_batches > 0)
      printf("%8ld val_loss %.6f\n", r->st.step, gpt_run_eval(r));
    if (gpt_ckpt_due(ck, r->st.step, i == f->steps - 1) && save(r, ck, err, errlen)) return -1;
    fflush(stdout);
  }
  if (done && r->o.eval_batches > 0 && (f->eval_every <= 0 || r->st.step % f->eval_every != 0))
    printf("%8ld val_loss %.6f\n", r->st.step, gpt_run_eval(r));
  if (done)
    printf("# %d steps in %.2f s: %.0f tokens/s, %.2f GFLOP/s, MFU %.1f%%\n", done, t_all,
           tokens * done / t_all, fpt * tokens * done / t_all / 1e9,
           100.0 * fpt * tokens * done / t_all / 1e9 / f->peak_gflops);
  return 0;
}

int main(int argc, char **argv) {
  gpt_blas_choose(argv); /* first: it may re-execute the program (blas_core.h) */
  train_flags f = gpt_trainer_defaults(NULL, NULL);
  f.eval_every = 50;
  if (parse_flags(argc, argv, &f)) return 2;
  char err[2048];
  gpt_run r;
  if (gpt_run_init(&r, &f.run, err, sizeof(err))) {
    fprintf(stderr, "weft-train: %s\n", err);
    gpt_run_free(&r);
    return 1;
  }
  /* Measured unless given, as the distributed trainers do: a fixed default (112 GFLOP/s,
   * once) read 94% MFU on an AVX-512 core whose FMA loop reaches 173. */
  gpt_peak peak;
  if (f.peak_gflops > 0) gpt_peak_given(f.peak_gflops, &peak);
  else gpt_measure_peak(&peak);
  f.peak_gflops = (float)peak.fma_gflops;
  print_model(&r, &peak);
  gpt_ckpt_track ck;
  gpt_ckpt_track_init(&ck, f.ckpt_dir, f.save_every, f.keep, &r.from, &r.st.step, f.steps);
  int rc = 0;
  if (train(&r, &f, &ck, err, sizeof(err))) {
    fprintf(stderr, "weft-train: %s\n", err);
    rc = 1;
  } else if (f.save && gpt_run_save(&r, f.save, err, sizeof(err))) {
    fprintf(stderr, "weft-train: %s\n", err);
    rc = 1;
  } else if (f.save) {
    printf("# saved %s at step %ld\n", f.save, r.st.step);
  }
  gpt_run_free(&r);
  return rc;
}

/* trainers/trainer_flags.c: the flags the weft trainers share; see trainer_flags.h. */
#include "trainers/trainer_flags.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_SHARED = 24 };

gpt_trainer_flags gpt_trainer_defaults(const char *log, const char *plot) {
  return (gpt_trainer_flags){.run = gpt_run_defaults(), .steps = 100, .seed = 1, .log = log, .plot = plot, .keep = 2};
}

/* Writes the shared entries into out (room for MAX_SHARED); returns how many. */
static int shared_flags(gpt_trainer_flags *f, unsigned groups, gpt_flag *out) {
  gpt_run_opts *r = &f->run;
  int n = 0;
  out[n++] = (gpt_flag){"data", GPT_FLAG_STR, &r->data, 0, 0};
  if (groups & GPT_FLAGS_SAVE) out[n++] = (gpt_flag){"save", GPT_FLAG_STR, &f->save, 0, 0};
  if (groups & GPT_FLAGS_CHECKPOINT) {
    out[n++] = (gpt_flag){"resume", GPT_FLAG_STR, &r->resume, 0, 0};
    out[n++] = (gpt_flag){"checkpoint-dir", GPT_FLAG_STR, &f->ckpt_dir, 0, 0};
    out[n++] = (gpt_flag){"save-every", GPT_FLAG_INT, &f->save_every, 0, 100000000};
    out[n++] = (gpt_flag){"keep", GPT_FLAG_INT, &f->keep, 0, 1000000};
  }
  if (groups & GPT_FLAGS_LOG) {
    out[n++] = (gpt_flag){"log", GPT_FLAG_STR, &f->log, 0, 0};
    out[n++] = (gpt_flag){"plot", GPT_FLAG_STR, &f->plot, 0, 0};
  }
  const gpt_flag common[] = {
      {"steps", GPT_FLAG_INT, &f->steps, 0, 100000000},
      {"layers", GPT_FLAG_INT, &r->model.layers, 1, 1024},
      {"dmodel", GPT_FLAG_INT, &r->model.dmodel, 1, 65536},
      {"heads", GPT_FLAG_INT, &r->model.heads, 1, 1024},
      {"seq", GPT_FLAG_INT, &r->model.seq, 1, 65536},
      {"batch", GPT_FLAG_INT, &r->batch, 1, 65536},
      {"seed", GPT_FLAG_INT, &f->seed, 0, 0x7fffffffL},
      {"eval-every", GPT_FLAG_INT, &f->eval_every, 0, 100000000},
      {"eval-batches", GPT_FLAG_INT, &r->eval_batches, 0, 100000},
      {"lr", GPT_FLAG_FLOAT, &r->opt.lr, 0, 0},
      {"wd", GPT_FLAG_FLOAT, &r->opt.weight_decay, 0, 0},
      {"clip", GPT_FLAG_FLOAT, &r->clip, 0, 0},
      {"peak-gflops", GPT_FLAG_FLOAT, &f->peak_gflops, 0, 0},
  };
  for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++) out[n++] = common[i];
  return n;
}

/* The model flags start at 0 (their ranges start at 1), so after parsing a non-zero one
 * was given; the others get their defaults back. */
static void split_given(gpt_trainer_flags *f, const gpt_config *defaults) {
  gpt_config *m = &f->run.model;
  f->run.given = (gpt_config){.seq = m->seq, .layers = m->layers, .dmodel = m->dmodel, .heads = m->heads};
  if (!m->seq) m->seq = defaults->seq;
  if (!m->layers) m->layers = defaults->layers;
  if (!m->dmodel) m->dmodel = defaults->dmodel;
  if (!m->heads) m->heads = defaults->heads;
}

/* The rules between flags; -1 after printing the problem. */
static int check_combination(const char *prog, gpt_trainer_flags *f) {
  if (!f->run.data) {
    fprintf(stderr, "%s: --data PATH is required\n", prog);
    return -1;
  }
  if (f->save_every > 0 && !f->ckpt_dir) {
    fprintf(stderr, "%s: --save-every needs --checkpoint-dir DIR\n", prog);
    return -1;
  }
  /* "DIR/" names the same directory as "DIR"; checkpoints are named DIR/step-N. */
  size_t n = f->ckpt_dir ? strlen(f->ckpt_dir) : 0;
  while (n > 1 && f->ckpt_dir[n - 1] == '/') ((char *)f->ckpt_dir)[--n] = '\0';
  return 0;
}

int gpt_trainer_parse(const char *prog, int argc, char **argv, gpt_trainer_flags *f, unsigned groups,
                      const gpt_flag *own, int nown, void (*usage)(FILE *f)) {
  gpt_flag *all = calloc((size_t)MAX_SHARED + (size_t)nown, sizeof(*all));
  if (!all) return -1;
  gpt_config defaults = f->run.model;
  f->run.model.seq = f->run.model.layers = f->run.model.dmodel = f->run.model.heads = 0;
  int n = shared_flags(f, groups, all);
  for (int i = 0; i < nown; i++) all[n++] = own[i];
  int rc = gpt_parse_flags(prog, argc, argv, all, n, usage);
  free(all);
  split_given(f, &defaults);
  if (rc) return -1;
  f->run.seed = (uint64_t)f->seed;
  if (check_combination(prog, f) == 0) return 0;
  usage(stderr);
  return -1;
}

void gpt_trainer_ckpt_usage(FILE *f, int width) {
  fprintf(f, "  %-*s sharded checkpoint DIR/step-N after the last step and every --save-every\n", width,
          "--checkpoint-dir DIR");
  fprintf(f, "  %-*s steps between checkpoints (0: only after the last)   --keep K  keep the last K (2; 0 = all)\n",
          width, "--save-every N");
  fprintf(f, "  %-*s continue from DIR (its newest complete checkpoint), DIR/step-N, or a --save file;\n", width,
          "--resume PATH");
  fprintf(f, "  %-*s the model's shape comes from it, written on any number of ranks\n", width, "");
}

int gpt_trainer_eval_due(const gpt_trainer_flags *f, long step, int last) {
  if (f->run.eval_batches <= 0) return 0;
  return (f->eval_every > 0 && step % f->eval_every == 0) || last;
}

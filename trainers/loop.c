/* trainers/loop.c: the single-process training loop; see loop.h. */
#include "trainers/loop.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The batch RNG gets a stream distinct from the initialisation's. */
#define BATCH_SEED_SALT 0x62617463685f726eull

gpt_run_opts gpt_run_defaults(void) {
  return (gpt_run_opts){
      .model = {.vocab = 0, .seq = 64, .layers = 4, .dmodel = 128, .heads = 4},
      .batch = 16,
      .seed = 1,
      .opt = gpt_adamw_defaults(),
      .clip = 1.0f,
      .eval_batches = 8,
  };
}

static int same_vocab(const gpt_tokenizer *a, const gpt_tokenizer *b) {
  return a->vocab == b->vocab && !memcmp(a->chars, b->chars, (size_t)a->vocab);
}

static int alloc_model(gpt_run *r, char *err, size_t errlen) {
  r->m = gpt_model_create(&r->o.model, r->o.batch, gpt_backend_cpu(), err, errlen);
  if (!r->m) return -1;
  r->st.adam_m = calloc(r->m->lay.total, sizeof(float));
  r->st.adam_v = calloc(r->m->lay.total, sizeof(float));
  if (r->st.adam_m && r->st.adam_v) return 0;
  snprintf(err, errlen, "out of memory for the optimizer state");
  return -1;
}

/* A single-file checkpoint (checkpoint.h). */
static int resume_file(gpt_run *r, const char *path, char *err, size_t errlen) {
  gpt_tokenizer tok;
  if (gpt_checkpoint_peek(path, &r->o.model, &tok, err, errlen)) return -1;
  if (!same_vocab(&tok, &r->ds.tok)) {
    snprintf(err, errlen,
             "checkpoint %s was trained on a text with a different character set "
             "(%d characters) than %s (%d)",
             path, tok.vocab, r->o.data, r->ds.tok.vocab);
    return -1;
  }
  if (gpt_ckpt_check_given(path, &r->o.given, &r->o.model, err, errlen) || alloc_model(r, err, errlen) ||
      gpt_checkpoint_load(path, r->m, &r->st, err, errlen))
    return -1;
  snprintf(r->from.path, sizeof(r->from.path), "%s", path);
  r->from.step = r->st.step;
  return 0;
}

/* A sharded checkpoint (ckpt.h) of any number of ranks: this process reads all of it. */
static int resume_sharded(gpt_run *r, const char *dir, char *err, size_t errlen) {
  gpt_ckpt_manifest man;
  if (gpt_ckpt_manifest_read(dir, &man, err, errlen)) return -1;
  int rc = gpt_ckpt_check_model(dir, &man.model, "gpt", &r->ds.tok, &r->o.given, err, errlen);
  if (rc == 0) {
    r->o.model = man.model.cfg;
    rc = alloc_model(r, err, errlen);
  }
  if (rc == 0 && man.model.floats != r->m->lay.total)
    rc = -1, snprintf(err, errlen, "checkpoint %s/manifest: %llu floats, but its model config has %zu", dir,
                      (unsigned long long)man.model.floats, r->m->lay.total);
  gpt_ckpt_seg whole = {0, 0, rc == 0 ? r->m->lay.total : 0};
  gpt_ckpt_local need = {{rc == 0 ? r->m->params : NULL, r->st.adam_m, r->st.adam_v}, &whole, 1};
  if (rc == 0) rc = gpt_ckpt_load(dir, &man, &need, err, errlen);
  if (rc == 0) {
    r->st.step = man.step;
    r->st.rng = man.rng;
    gpt_ckpt_origin_of(&r->from, dir, &man);
  }
  gpt_ckpt_manifest_free(&man);
  return rc;
}

/* Builds the model from the checkpoint's config (the flags' model shape, if given, must
 * agree). */
static int resume(gpt_run *r, char *err, size_t errlen) {
  char path[4200];
  int is_file;
  if (gpt_ckpt_resolve(r->o.resume, path, sizeof(path), &is_file, err, errlen)) return -1;
  return is_file ? resume_file(r, path, err, errlen) : resume_sharded(r, path, err, errlen);
}

static int fresh(gpt_run *r, char *err, size_t errlen) {
  r->o.model.vocab = r->ds.tok.vocab;
  if (alloc_model(r, err, errlen)) return -1;
  gpt_init_params(r->m, r->o.seed);
  gpt_rng_seed(&r->st.rng, r->o.seed ^ BATCH_SEED_SALT);
  r->st.step = 0;
  return 0;
}

int gpt_run_init(gpt_run *r, const gpt_run_opts *o, char *err, size_t errlen) {
  memset(r, 0, sizeof(*r));
  r->o = *o;
  if (gpt_dataset_load(&r->ds, o->data, 0.9, err, errlen)) return -1;
  if (o->resume ? resume(r, err, errlen) : fresh(r, err, errlen)) return -1;
  size_t T = (size_t)r->o.model.seq;
  if (r->ds.nval <= T + 1 || r->ds.ntrain <= T + 1) {
    snprintf(err, errlen, "%s is too short for sequences of %zu tokens", o->data, T);
    return -1;
  }
  r->x = malloc((size_t)o->batch * T * sizeof(int));
  r->y = malloc((size_t)o->batch * T * sizeof(int));
  if (!r->x || !r->y) {
    snprintf(err, errlen, "out of memory for the batch");
    return -1;
  }
  return 0;
}

void gpt_run_free(gpt_run *r) {
  gpt_model_free(r->m);
  gpt_dataset_free(&r->ds);
  free(r->st.adam_m);
  free(r->st.adam_v);
  free(r->x);
  free(r->y);
  memset(r, 0, sizeof(*r));
}

float gpt_run_step(gpt_run *r) {
  gpt_model *m = r->m;
  int B = r->o.batch, T = m->cfg.seq;
  gpt_batch_random(r->ds.train, r->ds.ntrain, B, T, &r->st.rng, r->x, r->y);
  gpt_zero_grad(m);
  float loss = gpt_forward(m, r->x, r->y, B, T);
  gpt_backward(m);
  double sumsq = gpt_grad_sumsq(m->grads, m->lay.total);
  r->last_norm = (float)sqrt(sumsq);
  float scale = gpt_clip_factor(sumsq, r->o.clip);
  r->st.step++;
  gpt_adamw_update(&r->o.opt, r->st.step, &m->lay, 0, m->lay.total, m->params, m->grads, r->st.adam_m,
                   r->st.adam_v, scale);
  return loss;
}

float gpt_run_eval(gpt_run *r) {
  int B = r->o.batch, T = r->m->cfg.seq;
  double sum = 0.0;
  for (int i = 0; i < r->o.eval_batches; i++) {
    gpt_batch_fixed(r->ds.val, r->ds.nval, B, T, (size_t)i * B, r->x, r->y);
    sum += gpt_eval_loss(r->m, r->x, r->y, B, T);
  }
  return (float)(sum / (r->o.eval_batches > 0 ? r->o.eval_batches : 1));
}

int gpt_run_save(gpt_run *r, const char *path, char *err, size_t errlen) {
  return gpt_checkpoint_save(path, r->m, &r->ds.tok, &r->st, err, errlen);
}

gpt_ckpt_save_req gpt_run_save_req(gpt_run *r, const char *trainer, const char *root, int keep, int global_batch,
                                   gpt_ckpt_seg *whole) {
  gpt_model *m = r->m;
  *whole = (gpt_ckpt_seg){0, 0, m->lay.total};
  return (gpt_ckpt_save_req){.root = root,
                             .keep = keep,
                             .trainer = trainer,
                             .model = gpt_ckpt_model_gpt(&m->cfg, &r->ds.tok, m->lay.total),
                             .step = r->st.step,
                             .rng = r->st.rng,
                             .global_batch = global_batch,
                             .own = {{m->params, r->st.adam_m, r->st.adam_v}, whole, 1}};
}

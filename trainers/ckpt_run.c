/* trainers/ckpt_run.c: a run's checkpoint bookkeeping: the checks before resuming, the
 * "resumed from" line, when to save, and the message when a run stops; see ckpt.h. */
#include "trainers/ckpt.h"

#include <stdio.h>
#include <string.h>

int gpt_ckpt_check_given(const char *path, const gpt_config *given, const gpt_config *file, char *err,
                         size_t errlen) {
  const char *names[] = {"seq", "layers", "dmodel", "heads"};
  const int g[] = {given->seq, given->layers, given->dmodel, given->heads};
  const int f[] = {file->seq, file->layers, file->dmodel, file->heads};
  for (int i = 0; i < 4; i++) {
    if (g[i] == 0 || g[i] == f[i]) continue;
    snprintf(err, errlen,
             "checkpoint %s: model config differs: --%s %d was given, the checkpoint has %s %d (vocab %d seq %d "
             "layers %d dmodel %d heads %d); drop the model flags to take the checkpoint's",
             path, names[i], g[i], names[i], f[i], file->vocab, file->seq, file->layers, file->dmodel, file->heads);
    return -1;
  }
  return 0;
}

int gpt_ckpt_check_model(const char *dir, const gpt_ckpt_model *md, const char *kind, const gpt_tokenizer *tok,
                         const gpt_config *given, char *err, size_t errlen) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/manifest", dir);
  if (strcmp(md->kind, kind)) {
    snprintf(err, errlen, "checkpoint %s holds a %s model; this trainer trains %s models", path, md->kind, kind);
    return -1;
  }
  if (md->cfg.vocab != tok->vocab || memcmp(md->chars, tok->chars, (size_t)tok->vocab)) {
    snprintf(err, errlen,
             "checkpoint %s was trained on a text with a different character set (%d characters) than this "
             "run's data (%d)",
             path, md->cfg.vocab, tok->vocab);
    return -1;
  }
  return gpt_ckpt_check_given(path, given, &md->cfg, err, errlen);
}

gpt_ckpt_model gpt_ckpt_model_gpt(const gpt_config *cfg, const gpt_tokenizer *tok, size_t floats) {
  gpt_ckpt_model md = {.kind = "gpt", .cfg = *cfg, .floats = floats};
  memcpy(md.chars, tok->chars, (size_t)tok->vocab);
  return md;
}

void gpt_ckpt_origin_of(gpt_ckpt_origin *o, const char *dir, const gpt_ckpt_manifest *m) {
  snprintf(o->path, sizeof(o->path), "%s", dir);
  snprintf(o->trainer, sizeof(o->trainer), "%s", m->trainer);
  o->step = m->step;
  o->world = m->world;
  o->global_batch = m->global_batch;
  o->groups = m->groups;
}

void gpt_ckpt_print_origin(const gpt_ckpt_origin *o, int global_batch, int groups) {
  if (!o->path[0]) return;
  if (!o->world) {
    printf("# resumed from %s (step %ld)\n", o->path, o->step);
    return;
  }
  printf("# resumed from %s (step %ld, written by %s on %d rank%s, global batch %d)\n", o->path, o->step, o->trainer,
         o->world, o->world == 1 ? "" : "s", o->global_batch);
  if (o->global_batch != global_batch)
    printf("# note: the global batch was %d sequences and is %d now: the data order differs from an unbroken run\n",
           o->global_batch, global_batch);
  if (o->groups != groups)
    printf("# note: %d capacity groups then, %d now: routing differs from an unbroken run (--groups)\n", o->groups,
           groups);
}

void gpt_ckpt_track_init(gpt_ckpt_track *t, const char *root, int every, int keep, const gpt_ckpt_origin *from,
                         const long *step, int steps) {
  memset(t, 0, sizeof(*t));
  t->root = root;
  t->every = every;
  t->keep = keep;
  t->step = step;
  t->target = *step + steps;
  if (from && from->path[0]) {
    snprintf(t->last, sizeof(t->last), "%s", from->path);
    t->last_step = from->step;
  }
}

int gpt_ckpt_due(const gpt_ckpt_track *t, long step, int last) {
  if (!t || !t->root) return 0;
  return last || (t->every > 0 && step % t->every == 0);
}

void gpt_ckpt_saved_note(gpt_ckpt_track *t, const gpt_ckpt_saved *s, long step, int rank) {
  snprintf(t->last, sizeof(t->last), "%s", s->dir);
  t->last_step = step;
  t->pending_id = 0;
  if (rank == 0)
    printf("# checkpoint %s (step %ld, %.2f MiB, %.0f ms)\n", s->dir, step, s->bytes / (1024.0 * 1024.0),
           s->seconds * 1e3);
}

void gpt_ckpt_failed_note(gpt_ckpt_track *t, const gpt_ckpt_saved *s, long step) {
  if (!s->id) return;
  t->pending_id = s->id;
  t->pending_step = step;
}

/* A save this rank took part in but did not hear the end of: rank 0 may have completed
 * it before the failure. It counts when its manifest is there and carries its id. */
static int pending_completed(const gpt_ckpt_track *t) {
  if (!t->pending_id || !t->root) return 0;
  char dir[4200], err[1024];
  gpt_ckpt_manifest m;
  gpt_ckpt_step_dir(dir, sizeof(dir), t->root, t->pending_step);
  if (gpt_ckpt_check_complete(dir, &m, err, sizeof(err))) return 0;
  int ours = m.id == t->pending_id;
  gpt_ckpt_manifest_free(&m);
  return ours;
}

void gpt_ckpt_print_stop(FILE *f, const gpt_ckpt_track *t, const char *prog, int rank) {
  if (!t || (!t->root && !t->last[0])) return;
  long now = t->step ? *t->step : 0, step = t->last_step;
  char last[4200];
  snprintf(last, sizeof(last), "%s", t->last);
  if (pending_completed(t)) {
    gpt_ckpt_step_dir(last, sizeof(last), t->root, t->pending_step);
    step = t->pending_step;
  }
  if (!last[0]) {
    fprintf(f, "%s: rank %d: stopped at step %ld; no checkpoint was written yet (--checkpoint-dir %s)\n", prog,
            rank, now, t->root);
    return;
  }
  fprintf(f,
          "%s: rank %d: stopped at step %ld; last complete checkpoint: %s (step %ld); relaunch with --resume %s "
          "--steps %ld to end at step %ld\n",
          prog, rank, now, last, step, last, t->target - step, t->target);
}

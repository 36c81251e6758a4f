/* trainers/loop.h: one single-process training run (data, model, optimizer, checkpoint),
 * shared by weft-train and the tests; the distributed trainers reuse its pieces.
 *
 * A step: draw B random training windows, zero the gradients, forward, backward, clip the
 * global gradient norm, AdamW. Evaluation: mean loss over eval_batches fixed validation
 * batches (the same tokens every time).
 */
#ifndef WEFT_TRAINERS_LOOP_H
#define WEFT_TRAINERS_LOOP_H

#include <stdint.h>

#include "trainers/adamw.h"
#include "trainers/checkpoint.h"
#include "trainers/ckpt.h"
#include "trainers/data.h"
#include "trainers/gpt.h"

typedef struct gpt_run_opts {
  const char *data;   /* text file */
  const char *resume; /* checkpoint to continue from (checkpoint.h's file, or ckpt.h's), or NULL */
  gpt_config model;   /* vocab is filled from the data */
  gpt_config given;   /* the model flags the user gave (0: not given): a resumed checkpoint must agree */
  int batch;
  uint64_t seed; /* parameter init; the batch RNG is seeded from it too */
  gpt_adamw opt;
  float clip; /* max global gradient norm; <= 0 disables */
  int eval_batches;
} gpt_run_opts;

typedef struct gpt_run {
  gpt_run_opts o;
  gpt_dataset ds;
  gpt_model *m;
  gpt_train_state st;
  int *x, *y;      /* [B, T] batch */
  float last_norm; /* gradient norm before clipping, of the last step */
  gpt_ckpt_origin from; /* what it resumed from */
} gpt_run;

/* Defaults: 4 layers, d 128, 4 heads, T 64, B 16, seed 1, AdamW defaults, clip 1.0. */
gpt_run_opts gpt_run_defaults(void);

/* Loads the data and builds (or resumes) the model. o->resume may name a single-file
 * checkpoint, one sharded checkpoint or a directory of them (the newest complete one is
 * taken, gpt_ckpt_resolve), written on any number of ranks by any dense trainer; the
 * model's shape then comes from the checkpoint. Returns -1 with a message in err. */
int gpt_run_init(gpt_run *r, const gpt_run_opts *o, char *err, size_t errlen);
void gpt_run_free(gpt_run *r);

/* One optimizer step; returns the training loss of its batch (before the update). */
float gpt_run_step(gpt_run *r);
/* Mean validation loss. */
float gpt_run_eval(gpt_run *r);
/* Saves a single-file checkpoint of the run (checkpoint.h). */
int gpt_run_save(gpt_run *r, const char *path, char *err, size_t errlen);

/* The run's state as a checkpoint save: the whole flat layout (one segment), this
 * trainer's name, the global batch; the caller sets own if it writes less (a rank's part). */
gpt_ckpt_save_req gpt_run_save_req(gpt_run *r, const char *trainer, const char *root, int keep, int global_batch,
                                   gpt_ckpt_seg *whole);

#endif

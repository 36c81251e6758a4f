/* trainers/checkpoint.h: save and resume a training run.
 *
 * File: a fixed header (magic "WEFTGPT1", format version, model config, the tokenizer's
 * bytes, step, the batch RNG's state, the parameter count), then the parameters and both
 * AdamW moments as raw little-endian fp32, then a 64-bit FNV-1a checksum of everything
 * before it. Written to a temporary, fsynced and renamed (atomic_file.h), so a crash
 * never leaves half a checkpoint. This single-file form is --save's (rank 0 gathers the
 * whole state); the periodic, sharded checkpoints of --checkpoint-dir are ckpt.h's.
 * Everything that decides the next step is in the file, so a resumed run continues
 * bit-identically to one that never stopped (same binary, same flags).
 */
#ifndef WEFT_TRAINERS_CHECKPOINT_H
#define WEFT_TRAINERS_CHECKPOINT_H

#include <stddef.h>

#include "trainers/data.h"
#include "trainers/gpt.h"
#include "trainers/rng.h"

typedef struct gpt_train_state {
  long step;              /* optimizer steps done */
  gpt_rng rng;            /* the training-batch RNG after those steps */
  float *adam_m, *adam_v; /* lay.total floats each */
} gpt_train_state;

int gpt_checkpoint_save(const char *path, const gpt_model *m, const gpt_tokenizer *tok,
                        const gpt_train_state *st, char *err, size_t errlen);

/* Reads just the config and tokenizer, to build the model before loading into it. */
int gpt_checkpoint_peek(const char *path, gpt_config *cfg, gpt_tokenizer *tok, char *err, size_t errlen);

/* Loads params and state into m (its config must match the file's). */
int gpt_checkpoint_load(const char *path, gpt_model *m, gpt_train_state *st, char *err, size_t errlen);

#endif

/* trainers/trainer_flags.h: the flags every weft trainer shares, as entries of a gpt_flag
 * table (flags.h).
 *
 * Data, model shape, batch, seed, evaluation, AdamW and clipping, step count and the MFU
 * peak are the same flags with the same ranges in weft-train and the four distributed
 * trainers; the checkpoint flags (--resume, --checkpoint-dir, --save-every, --keep),
 * --save and --log/--plot are groups a trainer opts into. Model flags the user gave are
 * remembered (run.given), so resuming a checkpoint of another shape is refused. A trainer
 * passes only the flags that are its own, so a range or a name changes in one place.
 */
#ifndef WEFT_TRAINERS_TRAINER_FLAGS_H
#define WEFT_TRAINERS_TRAINER_FLAGS_H

#include "trainers/flags.h"
#include "trainers/loop.h"

typedef struct gpt_trainer_flags {
  gpt_run_opts run; /* data, model, batch, optimizer, clip, eval batches, seed */
  int steps, eval_every, seed;
  float peak_gflops;
  const char *save, *log, *plot;
  const char *ckpt_dir; /* --checkpoint-dir: periodic sharded checkpoints (ckpt.h), or NULL */
  int save_every, keep; /* --save-every N (0: only after the last step), --keep K (0: all) */
} gpt_trainer_flags;

/* Optional groups of shared flags. */
enum {
  GPT_FLAGS_CHECKPOINT = 1, /* --resume PATH, --checkpoint-dir DIR, --save-every N, --keep K */
  GPT_FLAGS_LOG = 2,        /* --log CSV, --plot PNG */
  GPT_FLAGS_SAVE = 4,       /* --save CKPT: one single-file checkpoint at the end (checkpoint.h) */
};

/* weft-train's defaults (gpt_run_defaults), 100 steps, seed 1, keep 2, the given log and plot. */
gpt_trainer_flags gpt_trainer_defaults(const char *log, const char *plot);

/* Parses the shared flags (plus the groups in `groups`) and the trainer's own, then sets
 * run.seed from --seed, run.given from the model flags given, and requires --data (and
 * --checkpoint-dir with --save-every). Returns -1 after printing the problem and the usage
 * to stderr, as gpt_parse_flags. */
int gpt_trainer_parse(const char *prog, int argc, char **argv, gpt_trainer_flags *f, unsigned groups,
                      const gpt_flag *own, int nown, void (*usage)(FILE *f));

/* The usage lines of GPT_FLAGS_CHECKPOINT, option names padded to width columns. */
void gpt_trainer_ckpt_usage(FILE *f, int width);

/* Whether the step just taken evaluates: every eval_every steps, and after the last one. */
int gpt_trainer_eval_due(const gpt_trainer_flags *f, long step, int last);

#endif

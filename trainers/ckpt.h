/* trainers/ckpt.h: periodic sharded checkpoints of the weft trainers (--checkpoint-dir DIR
 * --save-every N --keep K), their resumption on any number of ranks, and what a trainer
 * says when it stops on a failure.
 *
 * Save (every rank, collective over a gpt_ckpt_group):
 *   1. rank 0 creates DIR/step-S (ckpt_dir.h), draws the save's random id, broadcasts it;
 *   2. every rank writes the segments it owns to its shard (ckpt_shard.h), atomically:
 *      temporary name, fsync, rename, fsync of the directory (atomic_file.h);
 *   3. rank 0 gathers every shard's size and checksum, checks it sees every shard with
 *      that size (the directory must be one filesystem for all ranks), then writes the
 *      manifest (ckpt_manifest.h) atomically: the checkpoint exists from that rename on;
 *   4. rank 0 removes what --keep K no longer keeps, then broadcasts the outcome.
 * A rank that dies anywhere in 1-4 leaves no manifest, so DIR/step-S stays incomplete and
 * the previous checkpoint stays the newest complete one; the shards of a save carry its id
 * in their names, so even a new save of the same step never touches the files a complete
 * manifest lists until its own manifest has replaced that one.
 *
 * Load (every rank, no communication): read the manifest, check the model against the
 * trainer's, then read every shard that overlaps the segments this rank needs, verifying
 * each one's size and checksum, and check the copied floats are exactly the ones needed.
 *
 * The group is the communicator seen from here: weft-train passes nranks 1 and no
 * functions; the distributed trainers pass weft's broadcast and gather (dist_comm.h).
 * A checkpoint directory must be one filesystem every rank sees, and belong to one job
 * at a time.
 */
#ifndef WEFT_TRAINERS_CKPT_H
#define WEFT_TRAINERS_CKPT_H

#include <stddef.h>
#include <stdio.h>

#include "trainers/ckpt_dir.h"
#include "trainers/ckpt_manifest.h"
#include "trainers/ckpt_shard.h"
#include "trainers/data.h"

typedef struct gpt_ckpt_group {
  int rank, nranks;
  void *ctx;
  /* bytes from rank 0 to every rank, in place. */
  int (*bcast)(void *ctx, void *buf, size_t bytes, char *err, size_t errlen);
  /* every rank's `bytes` to rank 0, in rank order (all is NULL elsewhere). */
  int (*gather)(void *ctx, const void *mine, void *all, size_t bytes, char *err, size_t errlen);
} gpt_ckpt_group;

/* A save: what the manifest says, and what this rank writes. */
typedef struct gpt_ckpt_save_req {
  const char *root; /* --checkpoint-dir */
  int keep;         /* --keep (0: all) */
  const char *trainer;
  gpt_ckpt_model model;
  long step;
  gpt_rng rng;
  int global_batch, groups;
  gpt_ckpt_local own;
} gpt_ckpt_save_req;

/* What a save wrote, for the trainer's "# checkpoint" line. */
typedef struct gpt_ckpt_saved {
  char dir[4200];
  uint64_t id;           /* the save's id, set as soon as rank 0 has shared it (0 before) */
  double bytes, seconds; /* all shards and the manifest; wall time on this rank */
} gpt_ckpt_saved;

/* Collective. Returns 0 once the checkpoint is complete on disk; -1 with the reason
 * (naming the rank and the file) in err on every rank that reached the end, e.g. when a
 * shard could not be written. A failed communication returns -1 at once. */
int gpt_ckpt_save(const gpt_ckpt_group *g, const gpt_ckpt_save_req *r, gpt_ckpt_saved *out, char *err,
                  size_t errlen);

/* Reads the state of the complete checkpoint dir (manifest m) into need's buffers.
 * -1 with the reason naming the file in err. */
int gpt_ckpt_load(const char *dir, const gpt_ckpt_manifest *m, const gpt_ckpt_local *need, char *err,
                  size_t errlen);

/* Rank 0 resolves --resume path (gpt_ckpt_resolve) and broadcasts the result, so every
 * rank resumes the same checkpoint. Collective. *is_file as gpt_ckpt_resolve's. */
int gpt_ckpt_resolve_group(const gpt_ckpt_group *g, const char *path, char *out, size_t outlen, int *is_file,
                           char *err, size_t errlen);

/* The manifest's model is `kind`, trained on tok's characters, and agrees with every model
 * flag the user gave (given: 0 = not given). -1 with "checkpoint DIR/manifest: ..." in err. */
int gpt_ckpt_check_model(const char *dir, const gpt_ckpt_model *md, const char *kind, const gpt_tokenizer *tok,
                         const gpt_config *given, char *err, size_t errlen);
/* Every field of given that is not 0 equals file's. -1 with "checkpoint PATH: ..." in err. */
int gpt_ckpt_check_given(const char *path, const gpt_config *given, const gpt_config *file, char *err,
                         size_t errlen);

/* A dense GPT's description for the manifest. */
gpt_ckpt_model gpt_ckpt_model_gpt(const gpt_config *cfg, const gpt_tokenizer *tok, size_t floats);

/* Where a run resumed from (path "" when it started fresh). */
typedef struct gpt_ckpt_origin {
  char path[4200];
  long step;
  int world, global_batch, groups; /* 0 when unknown (a single-file checkpoint) */
  char trainer[64];
} gpt_ckpt_origin;

/* o describes the sharded checkpoint dir of manifest m. */
void gpt_ckpt_origin_of(gpt_ckpt_origin *o, const char *dir, const gpt_ckpt_manifest *m);

/* Rank 0's header line "# resumed from PATH (step S, written by TRAINER on N ranks,
 * global batch G)", and a note when the global batch (or, for MoE, the capacity groups)
 * differ from this run's: the data order then differs from an unbroken run's. */
void gpt_ckpt_print_origin(const gpt_ckpt_origin *o, int global_batch, int groups);

/* The newest checkpoint a rank knows to be complete, for the message when it stops. */
typedef struct gpt_ckpt_track {
  const char *root; /* --checkpoint-dir, or NULL */
  int every, keep;
  const long *step; /* the trainer's step count */
  long target;      /* the step this launch ends at */
  char last[4200];  /* "" while none */
  long last_step;
  uint64_t pending_id; /* a save that failed on this rank after it started, 0 if none */
  long pending_step;
} gpt_ckpt_track;

void gpt_ckpt_track_init(gpt_ckpt_track *t, const char *root, int every, int keep, const gpt_ckpt_origin *from,
                         const long *step, int steps);
/* Whether the step just taken saves: every `every` steps, and after the last one. */
int gpt_ckpt_due(const gpt_ckpt_track *t, long step, int last);
/* A save completed: remember it; rank 0 prints "# checkpoint DIR (step S, ...)". */
void gpt_ckpt_saved_note(gpt_ckpt_track *t, const gpt_ckpt_saved *s, long step, int rank);
/* A save failed on this rank after it started (s->id set): rank 0 may still have
 * completed it, which gpt_ckpt_print_stop checks. */
void gpt_ckpt_failed_note(gpt_ckpt_track *t, const gpt_ckpt_saved *s, long step);
/* After a failure, to f: "PROG: rank R: stopped at step S; last complete checkpoint: DIR (step
 * K); relaunch with --resume DIR --steps N to end at step T" (or that none was written).
 * DIR is the last save this rank saw complete, or the one it was in when the failure
 * came if rank 0 completed it (its manifest carries that save's id). Nothing when no
 * checkpoint was configured or resumed. */
void gpt_ckpt_print_stop(FILE *f, const gpt_ckpt_track *t, const char *prog, int rank);

#endif

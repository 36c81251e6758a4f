/* trainers/ckpt_manifest.h: the manifest of a sharded checkpoint, written last: its
 * presence is what makes a checkpoint complete (ckpt.h).
 *
 * A text file, one "key values" line each, so a person can read what a checkpoint holds:
 *
 *     weft-checkpoint 1
 *     id 5f0c3a9e12d47b68                 the save's random id, also in every shard
 *     trainer weft-train-fsdp             who wrote it
 *     model gpt                           gpt or moe
 *     config vocab 65 seq 16 layers 2 dmodel 32 heads 2
 *     experts 0 hidden 0                  MoE: experts per layer, expert hidden width
 *     routing topk 0 capacity 0 aux 0     MoE: top-k, capacity factor, aux loss weight
 *     chars 0a20212627...                 the tokenizer's bytes, hex
 *     floats 28096                        floats of the full layout (per buffer)
 *     step 40                             optimizer steps done
 *     rng 9a1f... 33c0... 5e72... 0b4d... the batch RNG after them (the data position)
 *     world_size 4                        ranks that wrote it
 *     global_batch 8                      sequences per optimizer step
 *     groups 0                            MoE capacity groups in all (0: not MoE)
 *     shards 4
 *     shard 0 shard-00000-of-00004.5f0c3a9e12d47b68 68412 1b0e7c2d9a4f6385    name, bytes, FNV-1a
 *     ...
 *     checksum 7d2a61f0c83b94e5           FNV-1a of every byte before this line
 *
 * The reader checks the checksum line first, so a torn or edited manifest is refused.
 */
#ifndef WEFT_TRAINERS_CKPT_MANIFEST_H
#define WEFT_TRAINERS_CKPT_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "trainers/ckpt_shard.h"
#include "trainers/gpt.h"

/* What model the state belongs to. */
typedef struct gpt_ckpt_model {
  char kind[8]; /* "gpt" or "moe" */
  gpt_config cfg;
  int experts, expert_hidden; /* MoE only, else 0 */
  int topk;                   /* MoE routing (flags, not shape: a resume may change them) */
  float capacity_factor, aux_alpha;
  unsigned char chars[256];   /* the tokenizer's bytes (cfg.vocab of them) */
  uint64_t floats;            /* of the full layout */
} gpt_ckpt_model;

typedef struct gpt_ckpt_shard_entry {
  char name[96];
  gpt_ckpt_file_info info;
} gpt_ckpt_shard_entry;

typedef struct gpt_ckpt_manifest {
  uint64_t id;
  char trainer[64];
  gpt_ckpt_model model;
  long step;
  gpt_rng rng;
  int world, global_batch, groups;
  int nshards;                 /* == world */
  gpt_ckpt_shard_entry *shard; /* nshards, rank order */
} gpt_ckpt_manifest;

/* The name of rank's shard of a save: "shard-RRRRR-of-NNNNN.ID" (unique per save, so a
 * new save of the same step never overwrites the shards a complete manifest lists). */
void gpt_ckpt_shard_name(char *out, size_t n, int rank, int nranks, uint64_t id);

/* The stamp rank's shard must carry. */
gpt_ckpt_stamp gpt_ckpt_manifest_stamp(const gpt_ckpt_manifest *m, int rank);

/* Writes DIR/manifest atomically (atomic_file.h). -1 with the reason in err. */
int gpt_ckpt_manifest_write(const char *dir, const gpt_ckpt_manifest *m, char *err, size_t errlen);
/* Reads and checks DIR/manifest; m->shard is malloc'd (gpt_ckpt_manifest_free). -1 with
 * "checkpoint manifest DIR/manifest: WHY" in err (missing: "incomplete checkpoint"). */
int gpt_ckpt_manifest_read(const char *dir, gpt_ckpt_manifest *m, char *err, size_t errlen);
void gpt_ckpt_manifest_free(gpt_ckpt_manifest *m);

#endif

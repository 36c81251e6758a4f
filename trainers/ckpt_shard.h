/* trainers/ckpt_shard.h: one rank's shard of a sharded checkpoint (ckpt.h), and the
 * resharding reader.
 *
 * Every trainer's training state is three float buffers of one layout: the parameters and
 * the two AdamW moments. Checkpoints address them in the FULL flat layout (gpt.h's for the
 * dense model; moe_model_gather's 1-process layout, all experts, for MoE), whatever part
 * of it a rank holds: a rank describes its local buffers as segments, "floats [full_off,
 * full_off + len) of the full layout are at local_off of my buffers". A shard holds the
 * segments its rank OWNS (the owners' segments tile the full layout exactly once); a
 * reader asks for the segments it NEEDS, which may cut across any number of shards, so a
 * checkpoint written on N ranks loads on M (PyTorch's distributed checkpoint plans its
 * reads the same way, by overlapping chunks of the global tensors).
 *
 * File (little-endian, as the hosts weft runs on):
 *     header   magic "WEFTSHD1", version 1, header bytes, save id, rank, ranks, step,
 *              batch RNG state (4 x u64), floats of the full layout, segment count S
 *     table    S x (full_off u64, len u64)
 *     data     parameters of segment 0..S-1, then AdamW m of 0..S-1, then v of 0..S-1 (fp32)
 *     trailer  64-bit FNV-1a of every byte before it
 * written atomically (atomic_file.h). The manifest repeats the file's size and checksum,
 * and the header's save id, rank, ranks and step must equal the manifest's, so a shard of
 * another save, another job or another model is refused, naming the file.
 */
#ifndef WEFT_TRAINERS_CKPT_SHARD_H
#define WEFT_TRAINERS_CKPT_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "trainers/rng.h"

enum { GPT_CKPT_NBUFS = 3 }; /* parameters, AdamW m, AdamW v */

typedef struct gpt_ckpt_seg {
  size_t full_off, local_off, len; /* in floats */
} gpt_ckpt_seg;

/* A rank's buffers (each long enough for every local_off + len) and its segments. */
typedef struct gpt_ckpt_local {
  float *buf[GPT_CKPT_NBUFS];
  const gpt_ckpt_seg *seg;
  int nseg;
} gpt_ckpt_local;

/* What identifies a shard: the manifest has the same values. */
typedef struct gpt_ckpt_stamp {
  uint64_t id; /* the save's random id */
  int rank, nranks;
  long step;
  gpt_rng rng;
  uint64_t floats; /* of the full layout */
} gpt_ckpt_stamp;

typedef struct gpt_ckpt_file_info {
  uint64_t bytes, sum; /* size, FNV-1a trailer */
} gpt_ckpt_file_info;

/* Writes own's segments of all three buffers to path. info gets the size and checksum.
 * Returns -1 with the reason (naming the file) in err. */
int gpt_ckpt_shard_write(const char *path, const gpt_ckpt_stamp *s, const gpt_ckpt_local *own,
                         gpt_ckpt_file_info *info, char *err, size_t errlen);

/* Copies the floats of path's segments that fall inside need's segments into need's
 * buffers; *copied (added to) counts those floats of ONE buffer. The header must match
 * want, the size and checksum info; a shard that overlaps nothing of need is only checked
 * for its header and size. Returns -1 with the reason, naming path, in err. */
int gpt_ckpt_shard_read(const char *path, const gpt_ckpt_stamp *want, const gpt_ckpt_file_info *info,
                        const gpt_ckpt_local *need, size_t *copied, char *err, size_t errlen);

/* Floats need asks for (of one buffer). */
size_t gpt_ckpt_local_floats(const gpt_ckpt_local *l);

#endif

/* trainers/moe_ckpt.h: weft-train-moe's state in a sharded checkpoint (ckpt.h).
 *
 * The full layout is moe_model_gather's, the one a single process holds: the replicated
 * floats [0, rep_total), then every layer's E experts in expert order. Rank r of N holds
 * experts [r E/N, (r+1) E/N) of each layer, contiguous in both layouts, so its part is
 * L + 1 segments:
 *     replicated   full [0, rep_total)                      local [0, rep_total)
 *     layer l      full rep_total + (l E + r E/N) * esz      local rep_total + l (E/N) esz,
 *                  E/N * esz floats (esz = floats per expert)
 * Rank 0 alone writes the replicated part (every rank holds the same bits, the trainer
 * checks it), every rank its experts; every rank reads both. So a checkpoint written on N
 * ranks loads on any M that divides E (the experts must split evenly), each rank reading
 * its experts from whichever shards hold them.
 */
#ifndef WEFT_TRAINERS_MOE_CKPT_H
#define WEFT_TRAINERS_MOE_CKPT_H

#include "trainers/ckpt.h"
#include "trainers/moe_model.h"

/* This rank's segments into segs (room for 1 + layers); with_replicated adds the
 * replicated part (the read map of every rank, the write map of rank 0). Returns the
 * count. */
int moe_ckpt_segments(const moe_model *m, int with_replicated, gpt_ckpt_seg *segs);

/* The manifest's description of m (kind "moe"). */
gpt_ckpt_model moe_ckpt_model(const moe_model *m, const gpt_tokenizer *tok);

/* What the user gave on the command line, 0 where nothing: a checkpoint must agree. */
typedef struct moe_given {
  gpt_config model;
  int experts, hidden;
} moe_given;

/* From dir's manifest m (already read): checks it is a MoE checkpoint of tok's text that
 * agrees with given and whose experts split over nranks, then sets cfg (vocab included)
 * and mc's shape (dmodel, experts, hidden) from it. -1 with the reason naming the
 * manifest in err. */
int moe_ckpt_shape(const char *dir, const gpt_ckpt_manifest *m, const gpt_tokenizer *tok, const moe_given *given,
                   int nranks, gpt_config *cfg, moe_config *mc, char *err, size_t errlen);

/* Rank 0's header note when the routing flags differ from the checkpoint's md (they are
 * taken from the command line, like --lr). */
void moe_ckpt_print_routing(const gpt_ckpt_model *md, const moe_config *mc);

#endif

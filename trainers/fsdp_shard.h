/* trainers/fsdp_shard.h: how weft-train-fsdp cuts the flat GPT parameter buffer into shards.
 *
 * ZeRO-3 / FSDP (Rajbhandari et al., "ZeRO", SC 2020; Zhao et al., "PyTorch FSDP", VLDB
 * 2023) shard every unit of gpt.h (0 embeddings, 1..L blocks, L+1 final LayerNorm) on its
 * own, so a unit is all-gathered just before it computes and its gradient reduce-scattered
 * just after. Unit u of n_u floats is padded to P_u = N * s_u, s_u = ceil(n_u / N); rank r
 * holds the floats [r * s_u, (r + 1) * s_u) of the padded unit, i.e. the flat range
 *     [unit_offset[u] + r * s_u, min(unit_offset[u] + (r + 1) * s_u, unit_offset[u + 1]))
 * followed by zeros up to s_u. A rank's local buffer is its shards of all units, unit after
 * unit: unit u's shard starts at local_off[u]. With N = 1 the local buffer IS the flat
 * layout, so one rank computes exactly what weft-train computes.
 *
 * Then weft_all_gather(local + local_off[u], gathered, s_u) rebuilds the unit in
 * gpt.h's layout (padding at the end), and weft_reduce_scatter(gathered_grad,
 * local + local_off[u], s_u) hands every rank the averaged gradient of its own floats.
 * Weight decay is per tensor, so the optimizer maps each shard back to its flat range
 * (fsdp_shard_range) and lets gpt_adamw_update find the tensors there.
 */
#ifndef WEFT_TRAINERS_FSDP_SHARD_H
#define WEFT_TRAINERS_FSDP_SHARD_H

#include <stddef.h>

#include "trainers/gpt.h"

typedef struct fsdp_plan {
  int nranks, rank, nunits;
  size_t *shard;     /* nunits: s_u, floats per rank of unit u (padded) */
  size_t *local_off; /* nunits + 1: unit u's shard in the local buffer */
  size_t max_padded; /* max over units of N * s_u: one gathered buffer holds any unit */
} fsdp_plan;

/* Plans the shards of lay for rank of nranks. Returns -1 when out of memory. */
int fsdp_plan_init(fsdp_plan *p, const gpt_layout *lay, int nranks, int rank);
void fsdp_plan_free(fsdp_plan *p);

/* Floats a rank holds (its local buffer's length), padding included. */
static inline size_t fsdp_local_total(const fsdp_plan *p) {
  return p->local_off[p->nunits];
}

/* Floats of unit u once gathered (N * s_u, padding included). */
static inline size_t fsdp_padded(const fsdp_plan *p, int u) {
  return p->shard[u] * (size_t)p->nranks;
}

/* The flat range [*lo, *hi) of unit u that rank owns; empty (lo == hi) when the unit is
 * too small to reach this rank. */
void fsdp_shard_range(const fsdp_plan *p, const gpt_layout *lay, int u, int rank, size_t *lo, size_t *hi);

/* local = this rank's shards of the flat buffer (padding zeroed). */
void fsdp_shard_copy_in(const fsdp_plan *p, const gpt_layout *lay, const float *flat, float *local);

#endif

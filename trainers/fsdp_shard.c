/* trainers/fsdp_shard.c: the shard plan of weft-train-fsdp; see fsdp_shard.h. */
#include "trainers/fsdp_shard.h"

#include <stdlib.h>
#include <string.h>

int fsdp_plan_init(fsdp_plan *p, const gpt_layout *lay, int nranks, int rank) {
  memset(p, 0, sizeof(*p));
  p->nranks = nranks;
  p->rank = rank;
  p->nunits = lay->nunits;
  p->shard = calloc((size_t)lay->nunits, sizeof(size_t));
  p->local_off = calloc((size_t)lay->nunits + 1, sizeof(size_t));
  if (!p->shard || !p->local_off) {
    fsdp_plan_free(p);
    return -1;
  }
  size_t N = (size_t)nranks;
  for (int u = 0; u < lay->nunits; u++) {
    size_t n = lay->unit_offset[u + 1] - lay->unit_offset[u];
    p->shard[u] = (n + N - 1) / N;
    p->local_off[u + 1] = p->local_off[u] + p->shard[u];
    if (p->shard[u] * N > p->max_padded) p->max_padded = p->shard[u] * N;
  }
  return 0;
}

void fsdp_plan_free(fsdp_plan *p) {
  free(p->shard);
  free(p->local_off);
  memset(p, 0, sizeof(*p));
}

void fsdp_shard_range(const fsdp_plan *p, const gpt_layout *lay, int u, int rank, size_t *lo, size_t *hi) {
  size_t base = lay->unit_offset[u], end = lay->unit_offset[u + 1];
  size_t a = base + (size_t)rank * p->shard[u], b = a + p->shard[u];
  if (a > end) a = end;
  if (b > end) b = end;
  *lo = a;
  *hi = b;
}

void fsdp_shard_copy_in(const fsdp_plan *p, const gpt_layout *lay, const float *flat, float *local) {
  memset(local, 0, fsdp_local_total(p) * sizeof(float));
  for (int u = 0; u < p->nunits; u++) {
    size_t lo, hi;
    fsdp_shard_range(p, lay, u, p->rank, &lo, &hi);
    memcpy(local + p->local_off[u], flat + lo, (hi - lo) * sizeof(float));
  }
}

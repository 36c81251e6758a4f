/* trainers/ddp_reducer.c: gradient buckets and their in-place WEFT_AVG all-reduce on a
 * stream; see ddp_reducer.h. */
#include "trainers/ddp_reducer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Walks the tensors from the last to the first, closing a bucket once it holds at least
 * its cap (so a bucket may pass the cap by one tensor, as PyTorch's do). */
static int plan_buckets(ddp_reducer *r, const gpt_layout *lay, size_t cap, size_t first_cap) {
  r->buckets = calloc((size_t)lay->ntensors + 1, sizeof(ddp_bucket));
  if (!r->buckets) return -1;
  size_t hi = lay->total, bytes = 0, limit = first_cap;
  for (int t = lay->ntensors - 1; t >= 0; t--) {
    bytes += lay->tensors[t].size * sizeof(float);
    if (bytes < limit || t == 0) continue;
    r->buckets[r->nbuckets++] = (ddp_bucket){lay->tensors[t].offset, hi};
    hi = lay->tensors[t].offset;
    bytes = 0;
    limit = cap;
  }
  if (hi > 0) r->buckets[r->nbuckets++] = (ddp_bucket){0, hi};
  return 0;
}

int ddp_reducer_init(ddp_reducer *r, const gpt_layout *lay, float *grads, size_t cap, size_t first_cap,
                     weft_comm_t comm, char *err, size_t errlen) {
  memset(r, 0, sizeof(*r));
  r->comm = comm;
  r->grads = grads;
  if (plan_buckets(r, lay, cap, first_cap)) {
    snprintf(err, errlen, "out of memory for the bucket table");
    return -1;
  }
  return gpt_comm_stream_init(&r->cs, err, errlen);
}

void ddp_reducer_free(ddp_reducer *r) {
  gpt_comm_stream_free(&r->cs);
  free(r->buckets);
  memset(r, 0, sizeof(*r));
}

/* The stream is idle between steps: taking its times restarts them at 0. */
void ddp_reducer_begin(ddp_reducer *r) {
  double busy, exposed;
  r->next = 0;
  gpt_comm_stream_take_times(&r->cs, &busy, &exposed);
}

static weft_status_t launch(ddp_reducer *r, const ddp_bucket *b) {
  gpt_comm_stream_begin_op(&r->cs);
  float *g = r->grads + b->lo;
  size_t count = r->sync_only ? 1 : b->hi - b->lo;
  weft_status_t st = weft_all_reduce(g, g, count, WEFT_FLOAT32, WEFT_AVG, r->comm, r->cs.stream);
  if (st != WEFT_SUCCESS) return st;
  gpt_comm_stream_enqueued(&r->cs);
  return WEFT_SUCCESS;
}

weft_status_t ddp_reducer_ready_from(ddp_reducer *r, size_t lo) {
  while (r->next < r->nbuckets && r->buckets[r->next].lo >= lo) {
    weft_status_t st = launch(r, &r->buckets[r->next]);
    if (st != WEFT_SUCCESS) return st;
    r->next++;
  }
  return WEFT_SUCCESS;
}

weft_status_t ddp_reducer_wait(ddp_reducer *r, double *exposed_s, double *comm_s) {
  weft_status_t st = gpt_comm_stream_wait(&r->cs);
  gpt_comm_stream_take_times(&r->cs, comm_s, exposed_s);
  return st;
}

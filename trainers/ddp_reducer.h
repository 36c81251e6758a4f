/* trainers/ddp_reducer.h: DDP's gradient buckets and their overlapped all-reduce.
 *
 * As PyTorch's DistributedDataParallel (Li et al., "PyTorch Distributed", VLDB 2020): the
 * gradients are cut into buckets in REVERSE parameter order (the order the backward
 * finishes them), each capped at --bucket-mb (25 MiB by default; the first, which the
 * backward completes soonest, at 1 MiB), and a bucket is all-reduced with WEFT_AVG as soon
 * as every gradient in it is final, while the backward goes on with earlier layers.
 *
 * Because gpt.h keeps all gradients in one flat buffer in forward order, a bucket is a
 * contiguous slice [lo, hi) of it cut at tensor boundaries: no packing copy, the
 * all-reduce runs in place. And since the backward finishes units strictly from the last
 * to the first, "every gradient at offset >= lo is final" is all the readiness bookkeeping
 * needed: after unit u's backward, every bucket with lo >= unit_offset[u] goes.
 *
 * Timing: the all-reduces run on one weft stream with a busy-time watcher (comm_stream.h):
 * comm time is the time the stream held work, exposed comm the time the trainer itself
 * waited for it before the optimizer step. Comm time thus includes waiting for a slower
 * peer to finish the same bucket's backward, and exposed comm the watcher's wake-up (tens
 * of microseconds), so with --no-overlap it can exceed comm time by that much.
 */
#ifndef WEFT_TRAINERS_DDP_REDUCER_H
#define WEFT_TRAINERS_DDP_REDUCER_H

#include <stddef.h>
#include <weft.h>

#include "trainers/comm_stream.h"
#include "trainers/gpt.h"

typedef struct ddp_bucket {
  size_t lo, hi; /* float offsets into the flat gradient buffer */
} ddp_bucket;

typedef struct ddp_reducer {
  weft_comm_t comm;
  gpt_comm_stream cs; /* the stream the all-reduces run on, and its clock */
  float *grads;
  int nbuckets;
  ddp_bucket *buckets; /* in launch order: highest offsets first */
  int next;            /* first bucket not launched in this step */
  int sync_only;       /* all-reduce one value per bucket, not the bucket (--sync-only) */
} ddp_reducer;

/* Plans the buckets over lay (cap and first_cap in bytes) and starts the stream and its
 * watcher; sync_only set afterwards makes each bucket's all-reduce one float (the first of
 * the bucket): the same calls at the same moments with no gradient bytes, for measuring
 * what synchronous steps alone cost. Returns -1 with the reason in err. */
int ddp_reducer_init(ddp_reducer *r, const gpt_layout *lay, float *grads, size_t cap, size_t first_cap,
                     weft_comm_t comm, char *err, size_t errlen);
void ddp_reducer_free(ddp_reducer *r);

/* Starts a step: no bucket launched, comm time 0. */
void ddp_reducer_begin(ddp_reducer *r);
/* Every gradient at a flat offset >= lo is final: all-reduces each bucket inside [lo, end)
 * not yet launched. */
weft_status_t ddp_reducer_ready_from(ddp_reducer *r, size_t lo);
/* Waits until every launched bucket is reduced; *exposed_s = the wait, *comm_s = the
 * stream's busy time in this step. Returns the first error of the step's all-reduces. */
weft_status_t ddp_reducer_wait(ddp_reducer *r, double *exposed_s, double *comm_s);

#endif

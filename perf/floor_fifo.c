/* floor_fifo.c: membw_floor's all_reduce_plain form (floor_fifo.h). */
#include "perf/floor_fifo.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include "perf/floor_stream.h"
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define WAIT_LIMIT_S 10

static int fifo_init(floor_fifo *f, size_t slot_bytes, unsigned nslots) {
  f->slot_floats = slot_bytes / sizeof(float);
  f->nslots = nslots;
  atomic_init(&f->head, 0);
  atomic_init(&f->tail, 0);
  f->slots = aligned_alloc(4096, (slot_bytes * nslots + 4095) / 4096 * 4096);
  return f->slots != NULL ? 0 : -1;
}

int floor_link_init(floor_link *l, size_t slot_bytes, unsigned nslots) {
  l->rs.slots = l->ag.slots = NULL;
  if (fifo_init(&l->rs, slot_bytes, nslots) != 0 || fifo_init(&l->ag, slot_bytes, nslots) != 0) {
    floor_link_free(l);
    return -1;
  }
  return 0;
}

void floor_link_free(floor_link *l) {
  free(l->rs.slots);
  free(l->ag.slots);
  l->rs.slots = l->ag.slots = NULL;
}

/* Waits until *counter > least (acquire): a few hundred pauses, then sched_yield, since the
 * two threads may share a core. Exits after WAIT_LIMIT_S. */
static void wait_above(_Atomic size_t *counter, size_t least, const char *what) {
  double start = 0;
  for (unsigned spins = 0; atomic_load_explicit(counter, memory_order_acquire) <= least; spins++) {
    if (spins < 256) {
#ifdef __SSE2__
      _mm_pause();
#endif
      continue;
    }
    sched_yield();
    if ((spins & 1023) == 0) {
      double t = now_s();
      if (start == 0) {
        start = t;
      } else if (t - start > WAIT_LIMIT_S) {
        fprintf(stderr, "membw_floor: all_reduce_plain: no %s for %d s (the peer thread stopped)\n",
                what, WAIT_LIMIT_S);
        exit(1);
      }
    }
  }
}

/* The slot piece number `piece` goes into, after waiting for the reader to free it. */
static float *claim(floor_fifo *f, size_t piece) {
  if (piece >= f->nslots) wait_above(&f->tail, piece - f->nslots, "free slot");
  return f->slots + (piece % f->nslots) * f->slot_floats;
}

static void publish(floor_fifo *f, size_t piece) {
  atomic_store_explicit(&f->head, piece + 1, memory_order_release);
}

/* The slot holding piece number `piece`, once the writer has published it. */
static const float *await(floor_fifo *f, size_t piece) {
  wait_above(&f->head, piece, "piece from the peer");
  return f->slots + (piece % f->nslots) * f->slot_floats;
}

static void release(floor_fifo *f, size_t piece) {
  atomic_store_explicit(&f->tail, piece + 1, memory_order_release);
}

void floor_plain_all_reduce(int t, const float *in, float *out, size_t count, floor_link *to,
                            floor_link *from) {
  size_t blk = count / 2, own = (size_t)t * blk, peer = (size_t)(1 - t) * blk;
  size_t step = to->rs.slot_floats, npieces = (blk + step - 1) / step;
  /* The pieces of earlier passes: the counters run on across passes. */
  size_t base = atomic_load_explicit(&to->rs.head, memory_order_relaxed);
  /* Reduce-scatter pieces go one ahead of the receives, so the peer's piece k is there by
   * the time this thread reduces its own piece k. */
  for (size_t k = 0; k <= npieces; k++) {
    if (k < npieces) {
      size_t at = k * step, n = blk - at < step ? blk - at : step;
      stream_copy(claim(&to->rs, base + k), in + peer + at, n);
      stream_fence();
      publish(&to->rs, base + k);
    }
    if (k == 0) continue;
    size_t j = k - 1, at = j * step, n = blk - at < step ? blk - at : step;
    const float *got = await(&from->rs, base + j);
    float *fwd = claim(&to->ag, base + j);
    stream_sum2(out + own + at, fwd, in + own + at, got, n);
    stream_fence();
    release(&from->rs, base + j);
    publish(&to->ag, base + j);
    stream_copy(out + peer + at, await(&from->ag, base + j), n);
    release(&from->ag, base + j);
  }
  stream_fence();
}

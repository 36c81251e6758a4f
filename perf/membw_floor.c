/* membw_floor.c: the memory-bandwidth floor of each 2-rank collective on this machine.
 *
 * Two threads in one address space (one per "rank") do only the memory work a 2-rank
 * collective of S bytes must do, with no communication protocol at all; a barrier separates
 * iterations. The best a real collective over shared memory can do is match it; `make bench`
 * prints weft's and Open MPI's busbw as fractions of it, and floor / MPI as the highest ratio
 * to Open MPI that any implementation could reach.
 *
 * S, the buffers and the busbw factors are those of perf/compare (bench_common.h), i.e.
 * nccl-tests': S is the larger of the send and receive buffer, float32, out-of-place, root 0;
 * B = S/2 is one rank's block. Bytes read / written per rank, and the factor (n = 2):
 *   all_reduce      out_t[h_t] = in_0[h_t] + in_1[h_t], then out_t[h_t] -> out_{1-t}[h_t]
 *                   (h_t: half t): read 2 x B + B, write B + B.       busbw = S/t x 2(n-1)/n = S/t
 *   all_reduce_fused  the least traffic: out_0[h_t] = out_1[h_t] = in_0[h_t] + in_1[h_t] in one
 *                   pass with non-temporal stores: read 2 x B, write 2 x B.  busbw = S/t.
 *                   About twice all_reduce's figure here; it is the floor the ceiling uses.
 *   all_reduce_plain  the least work when each rank's buffers are private (perf/floor_fifo.h):
 *                   every byte from the peer crosses a shared FIFO, reduce-scatter then
 *                   all-gather piece by piece: read 2 x B + 2 x B of FIFO, write 2 x B + 2 x B
 *                   of FIFO.  busbw = S/t. Its ratio to all_reduce_fused estimates the
 *                   "0.8 x floor" target's ceiling on plain buffers (not a strict bound:
 *                   weft's all-reduce ran up to 1.13x its busbw). Its two threads are bound to the
 *                   first two CPUs the process may use (-s, -k: the FIFOs' slots).
 *   all_gather      in_t (B bytes) -> out_0[t] and out_1[t]: read B, write 2 x B = S.
 *                   busbw = S/t x (n-1)/n. Each source chunk (64 KiB) is read from memory once
 *                   and written to both outputs from cache; the alternative (copy own block,
 *                   then read the peer's) reads every input byte twice.
 *   reduce_scatter  out_t = in_0[block t] + in_1[block t]: read 2 x B = S, write B.
 *                   busbw = S/t x (n-1)/n
 *   all_to_all      in_t[t] -> out_t[t], in_t[1-t] -> out_{1-t}[t]: read S, write S.
 *                   busbw = S/t x (n-1)/n
 *   broadcast       in_0 (root's S bytes) -> out_0 and out_1, thread t doing half t of both
 *                   copies, each chunk read once: read B, write S.   busbw = S/t x 1
 *                   (Open MPI's broadcast is in place, so the root copies nothing: its floor
 *                   would be one copy; weft's out-of-place one is measured, as compared.)
 * Copies whose destination is not read again use non-temporal stores where the CPU has them
 * (x86-64 SSE2; perf/floor_stream.h), so writes cost no read-for-ownership: the floor is the
 * least DRAM traffic, not a particular memcpy (plain stores and glibc memcpy measured 25-45%
 * slower here).
 * all_reduce keeps its original code (plain loop, then memcpy), so its figures compare with
 * earlier floor.jsonl files and the "0.7 x floor" target; all_reduce_fused is its least-traffic
 * form, the one comparable with the other collectives.
 *
 * Every form checks both outputs after timing, element by element (exit 1 at the first wrong
 * one; outputs are poisoned before each size and the two inputs differ), so a floor that
 * skipped or misplaced work could not read fast.
 * Buffers are first touched by the thread that owns them (in_t, out_t by thread t). Time is
 * the mean over -n barrier-separated iterations after -w warm-ups, as in perf/compare.
 * GB/s = 1e9 B/s, so busbw compares one to one with the perf tools' busbw column.
 *
 * Usage: membw_floor [-c COLL] [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP]
 *                    [-s SLOT_BYTES] [-k NSLOTS]
 *   COLL: all_reduce (default), all_reduce_fused, all_reduce_plain, all_gather,
 *   reduce_scatter, all_to_all, broadcast. -s, -k: all_reduce_plain's FIFOs, each way (default
 *   4 slots of 256 KiB: weft's shm FIFO holds 2 MiB, large messages moving in pieces of 256
 *   KiB, here split into a reduce-scatter and an all-gather FIFO).
 * Prints one JSON object per size: {"coll": C, "size": S, "time_us": t, "busbw": GB/s}. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, pthread_setaffinity_np */
#endif
#include <getopt.h>
#include <sched.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "perf/floor_fifo.h"
#include "perf/floor_stream.h"
#include "perf/size_arg.h"

typedef enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, BROADCAST, ALL_REDUCE_FUSED,
               ALL_REDUCE_PLAIN, NUM_COLLS } coll_t;

static const char *const coll_names[NUM_COLLS] = {"all_reduce", "all_gather", "reduce_scatter",
                                                  "all_to_all", "broadcast", "all_reduce_fused",
                                                  "all_reduce_plain"};
/* nccl-tests' busbw factor at n = 2 */
static const double coll_factor[NUM_COLLS] = {1.0, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0};

#define CHUNK_FLOATS (16384) /* 64 KiB: a source chunk stays in L1/L2 for its second copy */

typedef struct {
  coll_t coll;
  float *in[2], *out[2];
  size_t count; /* floats in S bytes; even */
  int iters;
  pthread_barrier_t *barrier;
  floor_link *link; /* all_reduce_plain: link[t] is the one thread t writes */
  int id;
  double seconds; /* thread 0: time of the timed iterations */
} worker;

/* src[0..n) to both d0 and d1, a chunk at a time so that src is read from memory once. */
static void dual_copy(float *d0, float *d1, const float *src, size_t n) {
  for (size_t i = 0; i < n; i += CHUNK_FLOATS) {
    size_t k = n - i < CHUNK_FLOATS ? n - i : CHUNK_FLOATS;
    stream_copy(d0 + i, src + i, k);
    stream_copy(d1 + i, src + i, k);
  }
}

/* The original all-reduce pass, unchanged: reduce half t, copy it to the peer's output. */
static void all_reduce_pass(const worker *w) {
  size_t half = w->count / 2;
  size_t lo = w->id == 0 ? 0 : half, hi = w->id == 0 ? half : w->count;
  float *mine = w->out[w->id], *theirs = w->out[1 - w->id];
  const float *a = w->in[0], *b = w->in[1];
  for (size_t i = lo; i < hi; i++) mine[i] = a[i] + b[i];
  memcpy(theirs + lo, mine + lo, (hi - lo) * sizeof(float));
}

/* One collective's worth of work for thread t (see the top comment for the bytes). */
static void one_pass(const worker *w) {
  int t = w->id;
  size_t blk = w->count / 2, at = (size_t)t * blk, other = (size_t)(1 - t) * blk;
  switch (w->coll) {
    case ALL_REDUCE: all_reduce_pass(w); break;
    case ALL_GATHER: dual_copy(w->out[0] + at, w->out[1] + at, w->in[t], blk); break;
    case REDUCE_SCATTER: stream_sum(w->out[t], w->in[0] + at, w->in[1] + at, blk); break;
    case ALL_TO_ALL:
      stream_copy(w->out[t] + at, w->in[t] + at, blk);
      stream_copy(w->out[1 - t] + at, w->in[t] + other, blk);
      break;
    case BROADCAST: dual_copy(w->out[0] + at, w->out[1] + at, w->in[0] + at, blk); break;
    case ALL_REDUCE_FUSED:
      stream_sum2(w->out[0] + at, w->out[1] + at, w->in[0] + at, w->in[1] + at, blk);
      break;
    case ALL_REDUCE_PLAIN:
      floor_plain_all_reduce(t, w->in[t], w->out[t], w->count, &w->link[t], &w->link[1 - t]);
      break;
    default: break;
  }
  stream_fence(); /* non-temporal stores are visible to the peer before the barrier */
}

/* Binds the calling thread to the t-th CPU the process may run on, as weftrun --bind-to core
 * binds rank t (all_reduce_plain: two threads handing slots to each other must not share a
 * core, nor move between L3s mid-run). Leaves it unbound when there is no such CPU. A thread
 * inherits its creator's binding, so the set is the one main read first. */
static cpu_set_t allowed; /* the CPUs the process may run on, read in main before any binding */

static void bind_to_nth_cpu(int t) {
  cpu_set_t one;
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET(cpu, &allowed) || seen++ != t) continue;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    return;
  }
}

static void *run(void *arg) {
  worker *w = arg;
  double t0 = 0;
  if (w->coll == ALL_REDUCE_PLAIN) bind_to_nth_cpu(w->id);
  for (int i = 0; i < w->iters; i++) {
    pthread_barrier_wait(w->barrier);
    if (i == 0) t0 = now_s();
    one_pass(w);
  }
  pthread_barrier_wait(w->barrier);
  w->seconds = now_s() - t0;
  return NULL;
}

/* A -b/-e size (perf/size_arg.h); exits on a bad one. */
static size_t parse_size(const char *s) {
  size_t v;
  if (perf_parse_size(s, &v) != 0) {
    fprintf(stderr, "membw_floor: bad size \"%s\"\n", s);
    exit(1);
  }
  return v;
}

/* Times iters passes of coll at size bytes (after warmup passes); seconds per pass. */
static double measure(coll_t coll, float **bufs, floor_link *link, size_t bytes, int iters,
                      int warmup) {
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, 2);
  worker w[2];
  for (int t = 0; t < 2; t++) {
    w[t] = (worker){coll, {bufs[0], bufs[1]}, {bufs[2], bufs[3]}, bytes / sizeof(float) / 2 * 2,
                    warmup, &barrier, link, t, 0};
  }
  pthread_t th;
  pthread_create(&th, NULL, run, &w[1]);
  run(&w[0]);
  pthread_join(th, NULL);
  w[0].iters = w[1].iters = iters;
  pthread_create(&th, NULL, run, &w[1]);
  run(&w[0]);
  pthread_join(th, NULL);
  pthread_barrier_destroy(&barrier);
  return w[0].seconds / iters;
}

typedef struct {
  float *bufs[2]; /* in_t and out_t of one thread */
  size_t count;
  float base; /* in_t[i] = base + i % 7: the two inputs differ, so a misplaced block shows */
} toucher;

/* First touch by the owning thread, so its pages sit where that thread runs. */
static void *touch(void *arg) {
  toucher *k = arg;
  for (int b = 0; b < 2; b++)
    for (size_t i = 0; i < k->count; i++) k->bufs[b][i] = k->base + (float)(i % 7);
  return NULL;
}

static int touch_all(float **bufs, size_t count) {
  toucher k[2] = {{{bufs[0], bufs[2]}, count, 0}, {{bufs[1], bufs[3]}, count, 8}};
  pthread_t th;
  if (pthread_create(&th, NULL, touch, &k[1]) != 0) return -1;
  touch(&k[0]);
  return pthread_join(th, NULL);
}

/* What out_u[i] must hold after a pass of coll over count floats (blk = count / 2); the
 * sums are exact (small integers). */
static float expected(coll_t coll, float *const *in, int u, size_t i, size_t blk) {
  switch (coll) {
    case ALL_GATHER: return in[i / blk][i % blk];                     /* block b from rank b */
    case ALL_TO_ALL: return in[i / blk][(size_t)u * blk + i % blk];   /* rank b's block u */
    case REDUCE_SCATTER: return in[0][(size_t)u * blk + i] + in[1][(size_t)u * blk + i];
    case BROADCAST: return in[0][i];
    default: return in[0][i] + in[1][i]; /* the all-reduce forms */
  }
}

/* Whether the pass did its collective: both outputs checked element by element (reduce-
 * scatter's first blk). 1 when right; else 0, with the first wrong element on stderr. */
static int outputs_exact(coll_t coll, float **bufs, size_t count) {
  size_t blk = count / 2, n = coll == REDUCE_SCATTER ? blk : count;
  for (int u = 0; u < 2; u++)
    for (size_t i = 0; i < n; i++) {
      float want = expected(coll, bufs, u, i, blk);
      if (bufs[2 + u][i] != want) {
        fprintf(stderr, "%s: %s over %zu floats: out_%d[%zu] = %g, want %g\n", "membw_floor",
                coll_names[coll], count, u, i, (double)bufs[2 + u][i], (double)want);
        return 0;
      }
    }
  return 1;
}

static int parse_coll(const char *s) {
  for (int k = 0; k < NUM_COLLS; k++)
    if (strcmp(s, coll_names[k]) == 0) return k;
  return strcmp(s, "alltoall") == 0 ? ALL_TO_ALL : -1;
}

int main(int argc, char **argv) {
  size_t minb = 16u << 20, maxb = 256u << 20;
  size_t slot_bytes = 256u << 10;
  int factor = 2, iters = 10, warmup = 2, coll = ALL_REDUCE, nslots = 4, c;
  while ((c = getopt(argc, argv, "b:c:e:f:k:n:s:w:h")) != -1) {
    switch (c) {
      case 'b': minb = parse_size(optarg); break;
      case 'c': coll = parse_coll(optarg); break;
      case 'e': maxb = parse_size(optarg); break;
      case 'f': factor = atoi(optarg); break;
      case 'k': nslots = atoi(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 's': slot_bytes = parse_size(optarg); break;
      case 'w': warmup = atoi(optarg); break;
      default:
        fprintf(stderr, "usage: %s [-c COLL] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]\n"
                        "       [-s SLOT_BYTES] [-k NSLOTS]\n"
                        "  COLL: all_reduce (default), all_reduce_fused, all_reduce_plain, all_gather,\n"
                        "        reduce_scatter, all_to_all, broadcast\n"
                        "  -s, -k: all_reduce_plain's FIFOs (default 4 slots of 256 KiB each way)\n",
                "membw_floor");
        return c == 'h' ? 0 : 2;
    }
  }
  if (coll < 0 || factor < 2 || iters < 1 || minb < 64 || maxb < minb || nslots < 2 ||
      slot_bytes < 64 || slot_bytes % 64 != 0) {
    fprintf(stderr, "%s: need a known -c, -f >= 2, -n >= 1, 64 <= -b <= -e, -k >= 2, -s a multiple of 64\n",
            "membw_floor");
    return 2;
  }
  floor_link link[2];
  memset(link, 0, sizeof link);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) CPU_ZERO(&allowed);
  if (coll == ALL_REDUCE_PLAIN && (floor_link_init(&link[0], slot_bytes, (unsigned)nslots) != 0 ||
                                   floor_link_init(&link[1], slot_bytes, (unsigned)nslots) != 0)) {
    fprintf(stderr, "%s: cannot allocate the FIFOs\n", "membw_floor");
    return 1;
  }
  float *bufs[4]; /* in_0, in_1, out_0, out_1; each S bytes, more than any collective needs */
  for (int i = 0; i < 4; i++) {
    bufs[i] = aligned_alloc(4096, (maxb + 4095) / 4096 * 4096);
    if (bufs[i] == NULL) {
      fprintf(stderr, "%s: cannot allocate 4 x %zu bytes\n", "membw_floor", maxb);
      return 1;
    }
  }
  if (touch_all(bufs, maxb / sizeof(float)) != 0) {
    fprintf(stderr, "%s: cannot start a thread\n", "membw_floor");
    return 1;
  }
  for (size_t bytes = minb; bytes <= maxb; bytes *= (size_t)factor) {
    size_t s = bytes / 8 * 8; /* two whole float blocks, as bench_common.h rounds */
    memset(bufs[2], 0xff, s); /* NaN: an element no pass wrote fails the check */
    memset(bufs[3], 0xff, s);
    double t = measure((coll_t)coll, bufs, link, s, iters, warmup);
    if (!outputs_exact((coll_t)coll, bufs, s / sizeof(float))) return 1;
    printf("{\"coll\": \"%s\", \"size\": %zu, \"time_us\": %.2f, \"busbw\": %.3f}\n", coll_names[coll], s,
           t * 1e6, (double)s / t / 1e9 * coll_factor[coll]);
    fflush(stdout);
  }
  for (int i = 0; i < 4; i++) free(bufs[i]);
  floor_link_free(&link[0]);
  floor_link_free(&link[1]);
  return 0;
}

/* direct.h: the direct algorithms, for collectives whose buffers lie in registered windows
 * (lib/window.h) on every rank of one host: each rank reads its peers' send buffers and
 * writes their receive buffers in place, so every byte crosses memory once, as in the
 * memory-bandwidth floor (perf/membw_floor.c), with no FIFO copy in between.
 *
 * One driver (algos/direct.c) runs them all in three phases:
 *   1. every rank sends every peer a descriptor of its buffers: (window id, offset) for
 *      the send and the receive buffer, or window id 0 when a buffer is in no window;
 *      receiving all n-1 also tells a rank that every peer has entered the call, so their
 *      buffers are ready to read and free to write;
 *   2. if any descriptor says 0, every rank (each sees the same n descriptors) falls back
 *      to the tuner's usual algorithm, which starts from there; else each rank runs the
 *      collective's `work` below on the mapped buffers;
 *   3. every rank sends every peer an empty "done" and waits for all n-1: no rank returns
 *      (and reuses its buffers) while a peer may still read or write them.
 * Cost: two all-to-all handshakes of (n-1) small messages (about 2 alpha) plus one pass
 * over memory; so it is picked only from WEFT_DIRECT_MIN_BYTES (lib/window.c) on.
 * Ideas from NCCL's symmetric-memory kernels and Open MPI's XPMEM path; no code taken. */
#ifndef WEFT_ALGOS_DIRECT_H
#define WEFT_ALGOS_DIRECT_H
#include <stddef.h>
#include "lib/algo.h"

/* What a direct collective needs from the driver: every rank's buffers as mapped here. */
typedef struct {
  char **in;    /* [nranks]: rank j's send buffer (ours: t->sendbuf); NULL where unused */
  char **out;   /* [nranks]: rank j's receive buffer */
  void *tmp;    /* WEFT__DIRECT_PIECE bytes of scratch, 64-byte aligned */
} weft__direct_bufs;

/* The memory kinds the direct rows take: the CPU's, and device memory in registered
 * windows (lib/stream_cuda.c passes a call on device buffers to them unstaged only then). */
#define WEFT__DIRECT_SPACES (WEFT__MEM_KINDS_CPU | WEFT__MEM_KIND_BIT(WEFT__MEM_CUDA))

/* Ranks a one-pass fold of every rank's block takes (its pointer arrays on the stack). */
#define WEFT__DIRECT_FOLD_MAX 64

/* Bytes a direct collective handles per step. Small, so a piece reduced into tmp is still
 * in L1 when it is copied out, and reads and non-temporal writes interleave finely: 2-rank
 * all-reduce 16-256 MiB measured 9.2-10.9 GB/s with 4 KiB pieces, 8.4-11.2 with 8 KiB,
 * 7.9-9.9 with 32 KiB, 7.3-9.5 with 128 KiB; 2 KiB pieces fell to 6.3-7.7 (call overhead). */
#define WEFT__DIRECT_PIECE (8u << 10)

typedef struct {
  /* The bytes of rank's send and receive buffers (send 0: unused, e.g. a broadcast off
   * the root); returns 0 when the call cannot run direct at all (in-place all-to-all). */
  int (*extents)(const weft__task *t, int rank, size_t *send_bytes, size_t *recv_bytes);
  /* This rank's share of the work, on buffers all ranks have made available. */
  void (*work)(const weft__task *t, const weft__direct_bufs *b);
} weft__direct_ops;

extern const weft__direct_ops weft__direct_all_reduce, weft__direct_all_gather,
    weft__direct_reduce_scatter, weft__direct_all_to_all, weft__direct_broadcast;

/* The driver, shared by every direct row (algos/<collective>/direct.c). */
weft_status_t weft__direct_start(weft__task *t);
weft_status_t weft__direct_progress(weft__task *t);
/* The rows' `wanted`: 1 when t should try its direct algorithm: comm has usable windows, t's collective has
 * one and its larger buffer holds at least comm->direct_min_bytes. Depends only on values equal on every
 * rank. Caller holds comm->lock. */
int weft__direct_wanted(const weft__task *t);

/* 1 when t's work goes in whole blocks, one copy or kernel each, instead of cache-sized
 * pieces: on a device every operation is a launch (microseconds of the host's time), so
 * 8 KiB pieces would cost thousands of launches a call. Device buffers reach the direct
 * algorithms only in registered windows (lib/stream_cuda.c), on 2 to WEFT__CUDA_FANOUT_MAX
 * ranks (mem/cuda_kernels.h): one fan-out kernel then folds every rank's block.
 * The guarded space (tests) takes the same path, so the suite runs it on a CPU. */
static inline int weft__direct_whole_blocks(const weft__task *t) {
  return t->mem->kind == WEFT__MEM_CUDA || t->mem->kind == WEFT__MEM_GUARDED;
}

/* Copies n bytes through t's memory space; past the cache (weft__mem_nt_flag) when the
 * collective's output (out_bytes, whole) is large. Shared by the work functions; the
 * driver waits for the space before telling peers it is done. */
void weft__direct_copy(const weft__task *t, void *dst, const void *src, size_t n, size_t out_bytes);

#endif

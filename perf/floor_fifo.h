/* floor_fifo.h: membw_floor's all_reduce_plain form, the two-copy floor: the memory work of a
 * 2-rank all-reduce whose buffers are private to each rank, moved through shared memory.
 *
 * A process cannot read another's private pages (Linux maps them to no one else; the one
 * copy the kernel offers, process_vm_readv, is slower than two here: perf/bench/RESULTS.md), so every byte
 * a rank needs from its peer crosses a buffer both can map: the peer writes it there, the
 * rank reads it back. With the reduce-scatter + all-gather plan (the ring at n = 2) that is
 * the least such traffic: per rank, B = S/2 bytes of its input out (the half the peer
 * reduces), B bytes of its reduced half out, and 2 x B in. Per thread t, over its input
 * in_t and output out_t (S bytes each), piece by piece of one slot:
 *   reduce-scatter: in_t[peer's half] -> rs FIFO (the peer reads it);
 *                   out_t[own half] = in_t[own half] + the peer's piece, stored to out_t and
 *                   to the ag FIFO;
 *   all-gather:     the peer's reduced piece -> out_t[peer's half].
 * Per rank: read 2 x B of memory + 2 x B of FIFO, write 2 x B of memory + 2 x B of FIFO.
 * Every store is non-temporal, the FIFO's too: with plain stores the peer reads the slot
 * from the writer's cache, and the pass ran 1.2-1.9x slower (AMD EPYC VM, 2026-11-30, the two
 * CPUs on two L3s, 3 alternating launches: 16 MiB 6.4-8.7 against 12.1-12.8 GB/s busbw,
 * 256 MiB 6.6-7.2 against 8.3-8.8), as weft's shm FIFO found. Reduce-scatter pieces go one
 * ahead of the receives (two ahead, or the all-gather copied one piece behind, was no faster).
 * A FIFO is a ring of slots with two counters; a waiting thread pauses, then yields. No
 * protocol besides: what two copies through shared memory cost, against all_reduce_fused's
 * one direct pass. Not a strict floor: weft's shm all-reduce, the same plan with its own
 * kernels, ran 1.01-1.13x its busbw (medians) in make bench on 2026-11-30.
 *
 * Thread safety: one FIFO has one writer thread and one reader thread. */
#ifndef WEFT_PERF_FLOOR_FIFO_H
#define WEFT_PERF_FLOOR_FIFO_H

#include <stdatomic.h>
#include <stddef.h>

typedef struct {
  float *slots;         /* nslots x slot_floats */
  size_t slot_floats;   /* floats per slot */
  unsigned nslots;
  _Alignas(64) _Atomic size_t head; /* pieces published by the writer */
  _Alignas(64) _Atomic size_t tail; /* pieces released by the reader */
} floor_fifo;

/* The two FIFOs thread t writes (its peer reads them). */
typedef struct {
  floor_fifo rs, ag;
} floor_link;

/* Sets up l's two FIFOs of nslots slots of slot_bytes (a multiple of 64, nslots >= 2),
 * page-aligned. 0, or -1 when memory runs out. Not thread-safe; before any pass. */
int floor_link_init(floor_link *l, size_t slot_bytes, unsigned nslots);

/* Frees what floor_link_init allocated. */
void floor_link_free(floor_link *l);

/* One all-reduce of count floats (even) by thread t in {0, 1}: out = in_0 + in_1, where the
 * peer's input reaches t only through from->rs and its half of the result through from->ag.
 * to is the link t writes, from the one its peer writes. Exits the process with a message
 * on stderr when a wait passes 10 s (a peer that stopped). Ends with an sfence, so the
 * non-temporal stores are visible once the caller's barrier passes. */
void floor_plain_all_reduce(int t, const float *in, float *out, size_t count, floor_link *to,
                            floor_link *from);

#endif

/* shm_ll.h: the low-latency (LL) protocol of the shm transport, for small messages.
 *
 * Why: the bulk FIFO publishes a message with a separate `tail` store on its own cache
 * line and needs a `head` store back, so even an 8-byte message moves three lines between
 * cores. An LL line carries data and its flag together: the receiver polls the very line
 * it then reads, so an 8-byte message moves one line, with no counter in between.
 *
 * Format (like NCCL's LL128, on x86's 64-byte lines): each line holds 56 data bytes and an
 * 8-byte flag; the sender copies the data, then stores the flag with release order. On
 * x86-64 (TSO) a release store is a plain mov and stores become visible in program order,
 * so whoever sees the flag sees the line's data: no fence and no system call. (On weaker
 * machines the same C11 code costs one barrier per line, still correct.) 56 bytes are
 * whole elements of every dtype, so a receiver reduces line by line on arrival.
 *   flag = check << 32 | 0x80000000 | (chunk seq & 0x7fffffff)
 * where check = weft__fp_check32(the call's fingerprint, message bytes, bulk messages the
 * sender started before) (lib/fingerprint.h, weft__shm_ll_check): a line of another call,
 * another size, or one that overtook an unreceived bulk message fails the receiver's compare. The chunk's note
 * (shm_fifo.h), written before its flags, then names the sender's call and size.
 * A message of B bytes is ceil(B / 1792) chunks (at least 1), one per buffer of 32 lines;
 * chunk seq s (from 1, per direction) uses buffer s % K (K = WEFT__SHM_LL_BUFS, 64). A
 * line's previous content in that buffer carries seq s - K, so buffers never need
 * clearing, and the flag is never 0, the value of fresh memory. The receiver stores s into
 * the FIFO's ll_done line when it has consumed chunk s and s is a multiple of
 * WEFT__SHM_LL_CREDIT_BATCH (below); the sender writes chunk s only once ll_done >= s - K
 * and re-reads ll_done only when its cached copy says it must wait. Why
 * many small buffers rather than 2 large ones: that re-read is a cache miss on the
 * sender's critical path; with 2 buffers a ping-pong of small messages paid it every other
 * message (+0.1 us at 8 bytes); and K is how far a sender runs ahead (shm_fifo.h).
 * Bytes: a B-byte message moves B * 64/56 bytes per side plus a flag line per 56 B; it
 * beats the bulk path up to a few KiB (the threshold is measured; see proto.h).
 * Both ends pick LL by the same rule (message bytes <= the receiver's threshold, which
 * the receiver sends at setup), so they always agree; when a mismatched message size makes
 * them disagree, the receiver sees data on the other path and reports the mismatch. */
#ifndef WEFT_SHM_LL_H
#define WEFT_SHM_LL_H
#include <stdatomic.h>
#include <stdint.h>
#include "lib/req.h"
#include "transports/shm/shm_fifo.h"

#define WEFT__SHM_LL_LINE_DATA 56

/* The receiver returns credit once per this many chunks (K/2), not after each. Why: a
 * streamed broadcast keeps its root K chunks ahead, waiting for credit, so a return after
 * every chunk was a store into a line the root kept reading, one more line moved between
 * the cores per message, and a doorbell look. Measured on the Zen 3 VM (2 ranks, 24
 * alternating launch pairs, order swapped every pair, 8-256 B): broadcast 1.02-1.27x faster
 * per call (medians of per-pair ratios; 64 B 1.27x, 19 of 24); no change beyond the noise
 * elsewhere: all-reduce 0.97-1.01x (20 pairs), all-gather 0.94-1.00x (24), send/recv
 * 0.90-1.19x (12), 4 ranks on 2 cores broadcast and all-reduce 0.97-1.03x (10).
 * It cannot deadlock: a sender stuck at chunk s has s > ll_done + K; a receiver that wants
 * chunk s has consumed every chunk before it, more than K past ll_done, and so returned
 * credit on the way (every BATCH <= K chunks). A sender may still run K - BATCH + 1 chunks
 * ahead at the least. */
#define WEFT__SHM_LL_CREDIT_BATCH 32
_Static_assert(WEFT__SHM_LL_CREDIT_BATCH <= WEFT__SHM_LL_BUFS, "credit returns before the sender must wait");
#define WEFT__SHM_LL_CHUNK (WEFT__SHM_LL_LINES * WEFT__SHM_LL_LINE_DATA) /* 1792 */

/* After consuming chunk s the receiver prefetches (for reading) the first line of chunk
 * s + this. Why: a stream of small messages (a loop of broadcasts, whose root runs up to K
 * chunks ahead) found each chunk's line in the sender's cache and paid a cross-core miss
 * per call, never overlapped, since every call starts with a locked instruction; prefetched
 * calls earlier, the line is there when its call comes. Why 4 and not 1: the sender
 * prefetches chunk s + 1 for writing after sending s (prefetch_next_chunk), so a receiver
 * one behind it would pull that line back before the write; a sender 3 chunks ahead is
 * rare (streams run far ahead, exchanges at most one). Where the sender has not written
 * chunk s + 4 yet the prefetch fetches a line the receiver read K chunks ago and likely
 * still holds, and the sender's write would have had to take it from there anyway.
 * Measured on the Intel VM (family 6 model 167), 2 ranks bound, `-z 2` in place, medians of
 * 3-5 alternating launches against the commit before, us per call: broadcast 8 B 0.082 ->
 * 0.068 (Open MPI 0.072-0.074), 32 B 0.076 -> 0.066, 128 B 0.142 -> 0.124, 512 B-2 KiB
 * within 1.5%; all-reduce, all-gather, reduce-scatter and all-to-all at 8 B-2 KiB within 4%
 * either way; 4 ranks on 2 cores within the launch spread. Distances 1, 2 and 8 measured
 * within 3% of 4 on the broadcast. */
#define WEFT__SHM_LL_RECV_PREFETCH_AHEAD 4
_Static_assert(WEFT__SHM_LL_RECV_PREFETCH_AHEAD < WEFT__SHM_LL_BUFS, "a buffer other than the one just read");

typedef struct {
  _Alignas(WEFT__SHM_LINE) char data[WEFT__SHM_LL_LINE_DATA];
  _Atomic uint64_t flag;
} weft__shm_ll_line;

_Static_assert(sizeof(weft__shm_ll_line) == WEFT__SHM_LINE, "one LL line per cache line");

static inline uint64_t weft__shm_ll_flag(uint64_t seq, uint32_t check) {
  return (uint64_t)check << 32 | 0x80000000u | (seq & 0x7fffffffu);
}

/* The 32-bit check an LL chunk's flag carries for r's message, bulk messages before it. */
static inline uint32_t weft__shm_ll_check(const weft__req *r, uint64_t bulk) {
  return weft__fp_check32(r->call->hash, r->bytes, bulk);
}

/* Whether flag marks chunk seq as written (whatever message size it names). */
static inline int weft__shm_ll_ready(uint64_t flag, uint64_t seq) {
  return (uint32_t)flag == (0x80000000u | (seq & 0x7fffffffu));
}

/* Line 0 of the buffer chunk seq uses. */
static inline weft__shm_ll_line *weft__shm_ll_buf(const weft__shm_fifo *f, uint64_t seq) {
  return (weft__shm_ll_line *)f->ll + (seq % WEFT__SHM_LL_BUFS) * WEFT__SHM_LL_LINES;
}
#endif

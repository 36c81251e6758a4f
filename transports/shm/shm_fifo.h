/* shm_fifo.h: the single-producer single-consumer FIFO that carries one direction of one
 * pair of ranks on a host, and the layout of a rank's inbound segment.
 *
 * As NCCL's connection buffers: the sender owns a monotonic `tail` step counter, the
 * receiver a monotonic `head`; step s lives in slot s % nslots. Slot s is free to write
 * while tail - head < nslots and holds data while head < tail. Each counter sits alone on
 * its cache line so the two sides never write the same line; release/acquire on the
 * counters orders the slot's header and payload. The fast path is loads, stores and
 * memcpy: no system call, no lock.
 *
 * A message of B bytes takes max(1, ceil(B / slot_bytes)) slots and starts at a fresh slot;
 * every slot but a message's last is full (slot_bytes is a multiple of 64), so a receiver
 * that reduces on arrival always gets whole elements. It moves in pieces: a piece fills up
 * to piece_slots consecutive slots (an eighth of the FIFO, as NCCL splits its buffer into
 * NCCL_STEPS = 8; never wrapping past the last slot) under one header, the first slot's,
 * copied in with one copy and published with one store of tail, and the receiver takes
 * it whole and moves head past all its slots. So small messages get many slots (how many
 * a sender may run ahead of its receiver) and large ones keep large pieces.
 *
 * Every piece's header names the sender's call (lib/fingerprint.h), checked by the
 * receiver before it takes the piece. Messages of up to 32 bytes ride inside the slot
 * header's line. A message sent by single copy (shm.c) takes one slot whose header holds
 * its address instead of data.
 *
 * Small messages take the low-latency (LL) buffers at the FIFO's end instead (shm_ll.h);
 * the receiver returns their credit in the ll_done line.
 *
 * Layout of one FIFO (all offsets multiples of 64; the payload starts page-aligned):
 *   [ctrl: tail | head | ll_done | probe line][nslots slot headers, one line each][pad]
 *   [nslots payloads][LL: WEFT__SHM_LL_BUFS buffers of WEFT__SHM_LL_LINES lines][LL notes]
 * A rank's segment is one page holding its doorbell (shm_doorbell.h), then nfifos such
 * FIFOs back to back, one per shm peer sending to it. */
#ifndef WEFT_SHM_FIFO_H
#define WEFT_SHM_FIFO_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "lib/fingerprint.h"

#define WEFT__SHM_LINE 64
#define WEFT__SHM_PAGE 4096

typedef struct {
  _Alignas(WEFT__SHM_LINE) _Atomic uint64_t tail; /* written by the sender only */
  _Alignas(WEFT__SHM_LINE) _Atomic uint64_t head; /* written by the receiver only */
  _Alignas(WEFT__SHM_LINE) _Atomic uint64_t ll_done; /* receiver: last LL chunk consumed */
  /* written by both: the sender's placement probe bounces it off the receiver (shm_placement.c) */
  _Alignas(WEFT__SHM_LINE) _Atomic uint64_t probe;
  /* beside it, the copy probe's exchange (shm_copy_probe.h), ordered by probe's steps */
  uint64_t copy_probe_src;           /* sender: its buffer's address; 0: no copy probe now */
  uint32_t copy_probe_out_ns;        /* receiver: copying the payload out of the FIFO */
  uint32_t copy_probe_read_ns;       /* receiver: reading copy_probe_src by single copy */
  uint32_t copy_probe_in_ns;         /* sender: copying the payload into the FIFO */
  /* A put (a single-copy slot whose put_from is not 0): the receiver asks the sender to write
   * the message's bytes from put_from on straight into its buffer (process_vm_writev) while
   * it reads those before put_from itself. put_slot and put_dst: written by the receiver
   * only (put_dst first), and only for a put it then waits for (one it does not want, it
   * does not ask for: it reads that message whole); put_done and put_errno by the sender
   * only (put_errno first). */
  _Alignas(WEFT__SHM_LINE) _Atomic uint64_t put_slot; /* the slot whose put is asked for, + 1 */
  uint64_t put_dst;                                    /* the message's address in the receiver */
  _Alignas(WEFT__SHM_LINE) _Atomic uint64_t put_done; /* the slot whose put is over, + 1 ... */
  int32_t put_errno; /* ... 0: its bytes are written; else the write failed: read them */
} weft__shm_fifo_ctrl;

/* Messages of up to this many bytes travel inside their slot header: one cache line moves
 * instead of two, which is most of the latency of a tiny message. (48 before the header
 * carried the call's fingerprint; LL takes messages this small unless WEFT_PROTO forbids.) */
#define WEFT__SHM_INLINE_BYTES 32

/* `bytes` of a slot that carries no payload but a single-copy descriptor: the receiver
 * reads the message straight out of the sender's memory at cma_src (process_vm_readv) and
 * advances head past this slot only when it has read all of it, which is how the sender,
 * whose request stays incomplete meanwhile, learns it may reuse its buffer. */
#define WEFT__SHM_CMA_SLOT UINT32_MAX
/* A put message of n bytes: the receiver reads [0, WEFT__SHM_PUT_FROM(n)), the sender
 * writes the rest; split on a page, so the two system calls pin no page twice. 0: too small
 * for a put. */
#define WEFT__SHM_PUT_FROM(n) (((n) / 2) & ~(uint64_t)(WEFT__SHM_PAGE - 1))

/* The LL buffers: WEFT__SHM_LL_BUFS buffers of this many 64-byte lines, each line 56
 * data bytes and an 8-byte flag (shm_ll.h). 32 lines carry 1792 bytes per buffer. A small
 * message takes a whole buffer, so the buffer count is how many messages a sender may run
 * ahead of its receiver: with 4 ranks on 2 cores a rank runs a whole time slice while its
 * peers wait descheduled, and with 8 buffers the broadcast root had to hand the core over
 * every 8 calls (3.3x Open MPI's context switches). 64 buffers (128 KiB per direction):
 * 4-rank broadcast 8-128 B 0.29-0.50 us against 0.67-1.06 with 8 (3 interleaved rounds;
 * Open MPI 0.37-0.67), 2-rank latencies unchanged. */
#define WEFT__SHM_LL_LINES 32
#define WEFT__SHM_LL_BUFS 64

/* Beside the LL buffers, one note per buffer: the call and size of the message whose chunk
 * fills it. The LL flag carries only 32 bits of them (weft__fp_check32); the receiver reads
 * the note only when that check fails, to name the sender's call, so on the fast path the
 * note's line stays in the sender's cache. */
typedef struct {
  weft__fp fp;
  uint64_t msg_bytes;
  uint64_t bulk_sent; /* bulk messages the sender had started before this one */
} weft__shm_ll_note;

typedef struct {
  _Alignas(WEFT__SHM_LINE) uint64_t msg_bytes; /* total bytes of the message this slot is part of */
  uint32_t bytes;                             /* payload bytes in this slot, or WEFT__SHM_CMA_SLOT */
  /* The sender's next LL chunk when it wrote this slot: the receiver must have read every
   * LL chunk before it (else a message of an earlier call went unreceived, see shm_ll.h). */
  uint32_t ll_seq;
  weft__fp fp;                                /* the sender's call (lib/fingerprint.h) */
  union {
    _Alignas(16) char inline_data[WEFT__SHM_INLINE_BYTES]; /* the payload when msg_bytes fits */
    struct {
      uint64_t cma_src;  /* WEFT__SHM_CMA_SLOT: the message's address in the sender */
      uint64_t put_from; /* ... and where the sender's put starts (0: no put; ctrl's put_*) */
    };
  };
} weft__shm_slot_hdr;

_Static_assert(sizeof(weft__shm_fifo_ctrl) == 6 * WEFT__SHM_LINE, "one line per counter");
_Static_assert(sizeof(weft__shm_slot_hdr) == WEFT__SHM_LINE, "one line per slot header");

static inline size_t weft__shm_round_up(size_t x, size_t to) {
  return (x + to - 1) / to * to;
}

/* Bytes before the first payload slot of a FIFO. */
static inline size_t weft__shm_fifo_payload_offset(size_t nslots) {
  return weft__shm_round_up(sizeof(weft__shm_fifo_ctrl) + nslots * sizeof(weft__shm_slot_hdr),
                            WEFT__SHM_PAGE);
}

/* Bytes before the LL buffers of a FIFO. */
static inline size_t weft__shm_fifo_ll_offset(size_t nslots, size_t slot_bytes) {
  return weft__shm_fifo_payload_offset(nslots) + nslots * slot_bytes;
}

/* Bytes of one FIFO (a multiple of the page size). */
static inline size_t weft__shm_fifo_bytes(size_t nslots, size_t slot_bytes) {
  return weft__shm_round_up(weft__shm_fifo_ll_offset(nslots, slot_bytes) +
                                WEFT__SHM_LL_BUFS * WEFT__SHM_LL_LINES * WEFT__SHM_LINE +
                                WEFT__SHM_LL_BUFS * sizeof(weft__shm_ll_note),
                            WEFT__SHM_PAGE);
}

/* Bytes before the first FIFO of a segment: the owner's doorbell page. */
#define WEFT__SHM_SEG_HEADER WEFT__SHM_PAGE

/* One side's view of a FIFO: pointers into the mapping, cached once at setup. */
typedef struct {
  weft__shm_fifo_ctrl *ctrl;
  weft__shm_slot_hdr *hdrs;
  char *payload;
  void *ll;          /* the LL buffers (weft__shm_ll_line[WEFT__SHM_LL_BUFS * LINES]) */
  weft__shm_ll_note *ll_notes; /* [WEFT__SHM_LL_BUFS], right after them */
  uint64_t nslots;
  uint64_t slot_bytes;
  uint64_t piece_slots; /* the most slots one piece fills (weft__shm_fifo_attach) */
} weft__shm_fifo;

/* Pieces of the largest size that fill a FIFO: NCCL_STEPS' 8 (see the top). */
#define WEFT__SHM_FIFO_PIECES 8
/* The largest piece in bytes, whatever the geometry: a slot header's bytes field is 32 bits. */
#define WEFT__SHM_PIECE_MAX_BYTES (1ull << 30)

/* The most slots one piece fills in a FIFO of nslots slots of slot_bytes: an eighth of them
 * (at least one), at most WEFT__SHM_PIECE_MAX_BYTES. Pure. */
static inline uint64_t weft__shm_fifo_piece_slots(uint64_t nslots, uint64_t slot_bytes) {
  uint64_t k = nslots / WEFT__SHM_FIFO_PIECES > 1 ? nslots / WEFT__SHM_FIFO_PIECES : 1;
  if (k * slot_bytes > WEFT__SHM_PIECE_MAX_BYTES)
    k = slot_bytes < WEFT__SHM_PIECE_MAX_BYTES ? WEFT__SHM_PIECE_MAX_BYTES / slot_bytes : 1;
  return k;
}

/* Points f at the FIFO starting at base (which must be zero-filled before first use). */
static inline void weft__shm_fifo_attach(weft__shm_fifo *f, void *base, size_t nslots,
                                         size_t slot_bytes) {
  f->ctrl = (weft__shm_fifo_ctrl *)base;
  f->hdrs = (weft__shm_slot_hdr *)((char *)base + sizeof(weft__shm_fifo_ctrl));
  f->payload = (char *)base + weft__shm_fifo_payload_offset(nslots);
  f->ll = (char *)base + weft__shm_fifo_ll_offset(nslots, slot_bytes);
  f->ll_notes = (weft__shm_ll_note *)((char *)f->ll + WEFT__SHM_LL_BUFS * WEFT__SHM_LL_LINES * WEFT__SHM_LINE);
  f->nslots = nslots;
  f->slot_bytes = slot_bytes;
  f->piece_slots = weft__shm_fifo_piece_slots(nslots, slot_bytes);
}

/* Slots a piece of n bytes fills (an empty or inline message still takes one). */
static inline uint64_t weft__shm_piece_slots(const weft__shm_fifo *f, uint64_t n) {
  return n <= f->slot_bytes ? 1 : (n + f->slot_bytes - 1) / f->slot_bytes;
}

/* The most bytes a piece starting at step may carry: piece_slots slots, fewer where the
 * slots end (a piece is contiguous: it never wraps around to the first slot). */
static inline uint64_t weft__shm_piece_max(const weft__shm_fifo *f, uint64_t step) {
  uint64_t k = f->nslots - step % f->nslots;
  return (k < f->piece_slots ? k : f->piece_slots) * f->slot_bytes;
}

static inline char *weft__shm_fifo_slot(const weft__shm_fifo *f, uint64_t step) {
  return f->payload + (step % f->nslots) * f->slot_bytes;
}

static inline weft__shm_slot_hdr *weft__shm_fifo_hdr(const weft__shm_fifo *f, uint64_t step) {
  return &f->hdrs[step % f->nslots];
}

/* Where the payload of step (whose header is h, for a message of msg_bytes) lives. */
static inline char *weft__shm_fifo_data(const weft__shm_fifo *f, weft__shm_slot_hdr *h,
                                        uint64_t step, uint64_t msg_bytes) {
  return msg_bytes <= WEFT__SHM_INLINE_BYTES ? h->inline_data : weft__shm_fifo_slot(f, step);
}
#endif

/* shm_conn.h: the shm transport's per-peer state, shared by shm.c (setup, bulk FIFO and
 * single copy) and shm_ll.c (the LL protocol). */
#ifndef WEFT_SHM_CONN_H
#define WEFT_SHM_CONN_H
#include <stdint.h>
#include <sys/types.h>
#include "lib/req.h"
#include "transports/shm/shm_doorbell.h"
#include "transports/shm/shm_fifo.h"
#include "transports/shm/shm_segment.h"

struct weft_comm;

/* Per-peer state, reached through weft__conn.priv. The counters are our private copies:
 * `tail` / `head` are ours to advance, `*_seen` the last value read of the other side's. */
typedef struct {
  weft__shm_fifo out; /* we send: lives in the peer's segment */
  uint64_t tail, head_seen;
  weft__shm_fifo in;  /* we receive: lives in our segment */
  uint64_t head, tail_seen;
  uint64_t cma_send_bytes; /* the peer reads our messages of >= this many bytes; 0: never */
  uint64_t cma_posted;     /* requests from our send queue's head that wait to be read */
  int cma_recv;            /* we may read the peer's memory (the probe worked) */
  int cma_all;             /* our WEFT_SHM_CMA_CALLS: 1 all, 2 put (shm_state.h) */
  int cma_errno;           /* why the probe failed, 0 when it worked or was not tried */
  /* Puts (shm_fifo.h, weft__req_put_wanted). As sender: bytes written of the put asked for
   * now, the last slot (+ 1) whose put we finished, and the error that stopped our puts (0:
   * none). As receiver: the last slot (+ 1) whose put we asked for, and 1 when the sender's
   * write of it failed (we read the rest ourselves). */
  uint64_t put_written, put_finished;
  int put_errno;
  uint64_t put_asked;
  int put_self;
  pid_t pid;               /* the peer's process, as our pid namespace sees it */
  char **scratch;          /* the state's reduce scratch (shared by all peers) */
  /* LL protocol (shm_ll.h): a message of bytes <= ll_*_max goes LL (ll_*_on) */
  int ll_send_on, ll_recv_on;
  uint64_t ll_send_max, ll_recv_max; /* the peer's threshold, and ours */
  uint64_t ll_send_seq, ll_done_seen; /* next chunk we write; the peer's ll_done as read */
  uint64_t ll_recv_seq;               /* next chunk we read */
  int prefetch_lines;                 /* after each message, prefetch for writing up to this
                                         many lines the next one will write (0: none; see
                                         weft__shm_prefetch_write) */
  /* Bulk (FIFO and single-copy) messages started in each direction. The two protocols are
   * separate channels, so a message of an earlier call left unreceived on one would not be
   * met by the next receive on the other: each LL chunk's check covers the sender's
   * bulk_sent, and each slot names the sender's LL position (shm_fifo.h). */
  uint64_t bulk_sent, bulk_recvd;
  weft__shm_doorbell *peer_bell;      /* the peer's doorbell, rung when it may wait on us */
  int ring_fence;                     /* 0: ring it without a fence (shm_doorbell.h) */
  unsigned empty_polls;               /* looks that found nothing: every 64th looks at the
                                         other protocol's buffer for a size mismatch */
  /* Placement (shm_placement.h): payloads of messages of >= WEFT__SHM_NT_MIN bytes that
   * we write into the peer's FIFO bypass our cache (nt_out), as set by WEFT_SHM_NT_COPY
   * or, in auto mode, by the last probe. */
  int nt_mode;                        /* WEFT__SHM_NT_{NEVER, ALWAYS, AUTO} */
  int nt_out;
  unsigned peer_rt_ns;                /* the last probe's cache-line round trip (0: none yet),
                                         whatever nt_mode: the core's single-copy policy
                                         reads it (weft__req_single_copy_wanted) */
  /* The copy probe (shm_copy_probe.h): which path moved its test payload to this peer
   * faster, a WEFT__SINGLE_COPY_* mask (lib/req.h; 0: not measured). copy_verdict_own: it
   * was measured on this connection, not taken from another of ours. */
  uint64_t payload_ready;             /* bytes at the start of each of out's payload slots
                                         that we have written once (weft__shm_payload_ready) */
  uint64_t payload_mapped;            /* ... of in's slots that we have read once */
  unsigned copy_verdict;
  int copy_verdict_own;
  unsigned copy_verdict_back;         /* the peer's verdict for its sends to us, from the same
                                         times (we answered its probe; 0: not measured) */
  uint64_t copy_probe_gen;            /* the placement probe that last ran it (0: none) */
  int copy_probe_split;               /* nt_out when it ran */
} weft__shm_conn;

/* Asks for the line at p in the exclusive state, ahead of a store of ours to it. After each
 * message a sender does this for the lines its next message will write (an LL chunk's first
 * lines, shm_ll.c; a FIFO slot's header and a small payload, shm.c), when they are free.
 * Why: those lines were last read by the receiver, so they sit in its cache, and our store
 * must fetch them back first (a cache-line round trip, ~500 ns between the two L3s of the
 * AMD EPYC VM). x86 commits stores in order, so the stores after it (the next call's
 * bookkeeping) queue behind it until the store buffer fills: `perf` of a 2-rank 16-byte
 * broadcast put 58% of the root's weft_broadcast samples on a plain stack store, and of a
 * 4 KiB one 33% of its samples on one store in the next call's launch. A prefetch is no
 * store: the line travels while the next call's code runs, and nothing waits for it. The
 * receiver is not disturbed: it reads those lines only after the message before them, and
 * a line it polls early it fetches once and keeps until our write. The count is capped by
 * WEFT_SHM_PREFETCH (shm_setup.c; the figures are in the README). */
#if defined(__x86_64__)
static inline void weft__shm_prefetch_write(const void *p) {
  __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
}
#else
static inline void weft__shm_prefetch_write(const void *p) { __builtin_prefetch(p, 1, 3); }
#endif

/* Wakes the peer if it sleeps, after what we just published (shm_doorbell.h). */
static inline void weft__shm_ring_peer(const weft__shm_conn *sc) {
  weft__shm_ring(sc->peer_bell, sc->ring_fence);
}

static inline int weft__shm_ll_send_eligible(const weft__shm_conn *sc, const weft__req *r) {
  return sc->ll_send_on && r->bytes <= sc->ll_send_max;
}

static inline int weft__shm_ll_recv_eligible(const weft__shm_conn *sc, const weft__req *r) {
  return sc->ll_recv_on && r->bytes <= sc->ll_recv_max;
}

/* LL progress of the head request of a queue (same contract as the transport's). */
weft_status_t weft__shm_ll_send_progress(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                         int *progressed);
weft_status_t weft__shm_ll_recv_progress(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                         int *progressed);
/* The mismatch that made chunk ll_recv_seq's check fail for r, as its note tells it: the
 * sender's call (weft__fp_mismatch) or, in the same call, its message size. */
weft_status_t weft__shm_ll_note_mismatch(struct weft_comm *comm, weft__conn *c,
                                         const weft__shm_conn *sc, const weft__req *r);
/* Whether chunk ll_recv_seq has started to arrive (the receiver waits on the bulk path and
 * checks whether the peer sent LL instead). */
int weft__shm_ll_arrived(const weft__shm_conn *sc);

/* Readies the first min(msg_bytes, slot_bytes) bytes (whole pages) of every slot of f
 * beyond the *done already readied, writing or only reading them, and records how far. */
static inline void weft__shm_prefault_slots(const weft__shm_fifo *f, uint64_t *done, uint64_t msg_bytes, int write) {
  uint64_t want = msg_bytes < f->slot_bytes ? msg_bytes : f->slot_bytes;
  want = (want + WEFT__SHM_PAGE - 1) / WEFT__SHM_PAGE * WEFT__SHM_PAGE;
  if (want > f->slot_bytes) want = f->slot_bytes;
  if (want <= *done) return;
  for (uint64_t s = 0; s < f->nslots; s++) {
    char *from = weft__shm_fifo_slot(f, s) + *done;
    if (write) weft__shm_prefault(from, want - *done, 1);
    else weft__shm_prefault_read(from, want - *done);
  }
  *done = want;
}

/* Before a message of msg_bytes through out's payload slots: writes once each page of the
 * first min(msg_bytes, slot_bytes) bytes of every slot that no earlier message reached
 * (weft__shm_prefault's why), so that cost, about 9 us a page on the development VM,
 * falls on the first message of a new size instead of on the later ones that first use
 * each slot. Measured: 4 ranks on 2 cores, 1 MiB all-to-all on two copies with 5 warm-up
 * calls ran 1163-1343 us per timed call (the last 3 of the 8 slots first written in the
 * timed calls: ~2300 pages, ~20 ms), 149-230 with this (126-182 with 40 warm-up calls).
 * Only as far as messages reach, as before: a pair that exchanges small messages commits
 * little memory, which matters with many ranks per host. No race: a message in flight
 * reaches at most payload_ready bytes into its slots (a longer one would have readied whole
 * slots), so nobody reads the bytes this rewrites with their own values. */
static inline void weft__shm_payload_ready(weft__shm_conn *sc, uint64_t msg_bytes) {
  weft__shm_prefault_slots(&sc->out, &sc->payload_ready, msg_bytes, 1);
}

/* The receiving side of it, for in's slots, reading only (the sender wrote those pages
 * before it published the message that needs them). */
static inline void weft__shm_payload_map(weft__shm_conn *sc, uint64_t msg_bytes) {
  weft__shm_prefault_slots(&sc->in, &sc->payload_mapped, msg_bytes, 0);
}

/* Reads n bytes at address src of process pid into dst by single copy (process_vm_readv,
 * as often as it takes); 0, or an errno (EIO: the peer's buffer ended early). */
int weft__shm_cma_read(pid_t pid, void *dst, uint64_t src, size_t n);
/* Writes n bytes from src into address dst of process pid by single copy
 * (process_vm_writev); 0, or an errno (EIO: the peer's buffer ended early). */
int weft__shm_cma_write(pid_t pid, uint64_t dst, const void *src, size_t n);

/* Whether an empty look should also check the other protocol (1 in 64: off the fast path). */
static inline int weft__shm_cross_check_due(weft__shm_conn *sc) {
  return (++sc->empty_polls & 63) == 0;
}
#endif

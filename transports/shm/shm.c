/* shm.c: the shared-memory transport, weft's path between processes of one host: its data
 * path and its hooks (transports/transport.h); setup is in shm_setup.c.
 *
 * Moving a message of B bytes: the sender copies it into max(1, ceil(B / slot)) slots of
 * the receiver's FIFO (shm_fifo.h), in pieces of up to the FIFO's piece_slots slots, one
 * copy and one publish each, and the receiver copies (or reduces) it out, both through
 * the message's memory space (mem/space.h): 2B bytes of memory traffic per side, no system
 * call, no lock; the counters are only re-read when the locally cached copy says the FIFO
 * is full (sender) or empty (receiver). Messages of up to 32 bytes ride in the slot
 * header's cache line, so a tiny message moves two lines (header, tail); those of up to
 * WEFT_LL_THRESHOLD go LL (shm_ll.h), one line each. Single copy (CMA): a message of at
 * least WEFT_SHM_CMA_BYTES moves once instead of twice. The sender writes one slot header
 * holding the message's address (its space's host view) and keeps its request open; the
 * receiver reads the sender's buffer with process_vm_readv (Linux cross-memory attach),
 * straight into its destination's host view, or through a 64 KiB scratch that it then
 * hands to the core when it reduces on arrival, and advances head past that slot only
 * after the last byte: the sender completes when it sees head pass. B bytes cost B of
 * memory traffic (plus a cache-resident bounce when reducing) and one system call per
 * MiB read (per 256 KiB written by a put). A put (weft__req_put_wanted: broadcast, gather
 * and scatter, whose senders would only wait) shares that copy: the receiver announces its
 * destination and reads the first half while the sender writes the second into it
 * (process_vm_writev; shm_fifo.h). Hooks:
 * a waiting rank sleeps on its doorbell (shm_doorbell.h), a peer whose process is gone has
 * failed, and every large collective may run the placement probe (shm_placement.h).
 * Ideas from NCCL's shm transport and Open MPI's vader FIFOs and CMA path; no code taken. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/status.h"
#include "lib/proto.h"
#include "mem/space.h"
#include "transports/shm/shm_conn.h"
#include "transports/shm/shm_copy_probe.h"
#include "transports/shm/shm_fifo.h"
#include "transports/shm/shm_ll.h"
#include "transports/shm/shm_membarrier.h"
#include "transports/shm/shm_placement.h"
#include "transports/shm/shm_segment.h"
#include "transports/shm/shm_state.h"
#include "transports/transport.h"

#define SHM_CMA_CALL_BYTES (1u << 20)      /* read or put per progress call, so other peers move too */
/* Bytes per system call. A read of 1 MiB, where 256 KiB pieces took four calls, ran on the
 * Intel VM of 2026-12-03 (family 6 model 167; 2 ranks bound, us per call, 3 launches
 * alternating with 256 KiB pieces): sendrecv 8M 699-733 against 746-911, 128M 23708-23896
 * against 26978-28765; all-to-all 64M 9512-9531 against 10304-10501 out of place; gather in
 * place 16M 362-369 against 427-439. A put written in 1 MiB pieces lost (in-place scatter
 * 64M 2230-2298 against 1803-1819), so puts keep 256 KiB, and so does the receiver's read
 * of its half of a put (in 1 MiB pieces, in-place broadcast 32-256 MiB ran 1-8% slower in
 * each of 3 rounds of make compare). (On an earlier VM pieces above 256 KiB had run 2x
 * slower.) */
#define SHM_CMA_READ_PIECE (1024u * 1024u)
#define SHM_CMA_PUT_PIECE (256u * 1024u)
#define SHM_CMA_REDUCE_PIECE (64u * 1024u) /* scratch of a reducing receive: stays in L2 */
#define SHM_CMA_MAX_POSTED 8 /* single-copy descriptors in flight per connection: cma_send_progress */

typedef weft__shm_conn shm_conn;

typedef weft__shm_state shm_state;

/* Whether single-copy message r goes as a put (shm_fifo.h): the core wants it
 * (weft__req_put_wanted, or WEFT_SHM_CMA_CALLS=put), it is large enough to split, and we
 * may write the peer's memory: the same permission as reading it, which our probe of the
 * peer proved (cma_recv), unless a put to it failed since. */
static int put_eligible(const struct weft_comm *comm, const shm_conn *sc, const weft__req *r) {
  return sc->cma_recv && sc->put_errno == 0 && WEFT__SHM_PUT_FROM(r->bytes) > 0 &&
         (sc->cma_all == 2 ||
          weft__req_put_wanted(comm, r, weft__shm_pair_verdict(sc->copy_verdict, sc->copy_verdict_back)));
}

/* LL is tried first, so a message small enough for LL never goes single copy; nor does
 * one in memory with no host view (the peer's process_vm_readv needs a host address), nor
 * one the core keeps on two copies (weft__req_single_copy_wanted: reductions, one-way
 * calls, broadcast between near cores) unless WEFT_SHM_CMA_CALLS=all or it goes as a put. */
static int cma_eligible(const struct weft_comm *comm, const shm_conn *sc, const weft__req *r) {
  if (sc->cma_send_bytes == 0 || r->bytes < sc->cma_send_bytes || r->src == NULL || weft__shm_ll_send_eligible(sc, r))
    return 0;
  unsigned verdict = weft__shm_pair_verdict(sc->copy_verdict, sc->copy_verdict_back);
  return (sc->cma_all || weft__req_single_copy_wanted(comm, r, sc->peer_rt_ns, verdict) ||
          put_eligible(comm, sc, r)) &&
         r->mem->host_view(r->mem, r->src, r->bytes) != NULL;
}

/* As sender, the put the receiver asked for, when it is r's, the oldest message posted (its
 * slot is at tail - cma_posted): writes up to SHM_CMA_CALL_BYTES more of r's bytes from
 * WEFT__SHM_PUT_FROM(r->bytes) on into the receiver's buffer, and says so in put_done after
 * the last. Everything written comes from r (its header in the peer's segment is not read
 * back), and only into the peer's own process. A receiver that does not want the put does
 * not ask (it reads the message whole, and its head passing completes r); one that asked
 * waits for put_done, so put_dst holds still meanwhile. A write that fails for another
 * reason than the peer being gone is reported to the receiver (put_errno), which then reads
 * the rest itself, and ends our puts to that peer. */
static weft_status_t put_progress(struct weft_comm *comm, weft__conn *c, shm_conn *sc, const weft__req *r,
                                  int *progressed) {
  weft__shm_fifo_ctrl *ctrl = sc->out.ctrl;
  uint64_t slot = sc->tail - sc->cma_posted + 1;
  if (sc->put_finished == slot || atomic_load_explicit(&ctrl->put_slot, memory_order_acquire) != slot)
    return WEFT_SUCCESS;
  *progressed = 1;
  uint64_t dst = ctrl->put_dst, from = WEFT__SHM_PUT_FROM(r->bytes);
  int err = sc->put_errno != 0 ? sc->put_errno : dst == 0 ? EFAULT : 0;
  if (err == 0) {
    const char *src = r->mem->host_view(r->mem, r->src, r->bytes);
    for (size_t budget = SHM_CMA_CALL_BYTES; from + sc->put_written < r->bytes && budget > 0 && err == 0;) {
      size_t at = from + sc->put_written, n = r->bytes - at;
      if (n > SHM_CMA_PUT_PIECE) n = SHM_CMA_PUT_PIECE;
      err = weft__shm_cma_write(sc->pid, dst + at, src + at, n);
      if (err == 0) sc->put_written += n;
      budget -= n;
    }
    if (err == ESRCH)
      return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: send to peer %d: the peer's process %d is gone "
                         "(single-copy write: %s)", comm->rank, c->peer, (int)sc->pid, strerror(err));
    if (err != 0) {
      sc->put_errno = err;
      WEFT_WARN("rank %d: send to peer %d: single-copy write into process %d failed (%s); the peer "
                "reads this message itself, and later ones are not written", comm->rank, c->peer,
                (int)sc->pid, strerror(err));
    } else if (from + sc->put_written < r->bytes) {
      return WEFT_SUCCESS;
    }
  }
  ctrl->put_errno = err;
  sc->put_written = 0;
  sc->put_finished = slot;
  atomic_store_explicit(&ctrl->put_done, slot, memory_order_release);
  weft__shm_ring_peer(sc);
  return WEFT_SUCCESS;
}

/* Single-copy send. Each message is one descriptor slot; its request completes when the
 * receiver's head passes that slot. Descriptors go out for r and for the eligible requests
 * queued behind it, as far as slots allow and at most SHM_CMA_MAX_POSTED (8, as many as
 * the FIFO had slots before it had 64), so the receiver reads message after message
 * without waiting for us to be scheduled (the chain and ring algorithms queue up to 8).
 * Uncapped, 64 slots took up to 16 descriptors of a 16 MiB all-gather at once, and
 * blocking calls (perf tools' -z 2, 2 ranks, out of place) ran 16 MiB in 1483-1516 us
 * against 1250-1390 on 8 slots in one run of alternating launches (not in a second run);
 * capped, 7 interleaved rounds of perf/compare against the build before read all-gather
 * and all-to-all 256 KiB-32 MiB at 0.94-1.12x, 0.99x and 1.00x as geometric means.
 * The cma_posted requests from the queue's head own the FIFO's last cma_posted slots;
 * the head's is at tail - cma_posted. A failed operation breaks the communicator, so this
 * count never outlives its requests into a later operation. */
static weft_status_t cma_send_progress(struct weft_comm *comm, weft__conn *c, shm_conn *sc, weft__req *r,
                                       int *progressed) {
  weft__shm_fifo *f = &sc->out;
  if (sc->cma_posted > 0) {
    WEFT_TRY(put_progress(comm, c, sc, r, progressed));
    sc->head_seen = atomic_load_explicit(&f->ctrl->head, memory_order_acquire);
    if (sc->head_seen > sc->tail - sc->cma_posted) {
      sc->cma_posted--;
      r->done = r->bytes;
      r->complete = 1;
      *progressed = 1;
    }
  }
  weft__req *q = r->complete ? r->next : r;
  for (uint64_t skip = sc->cma_posted; q != NULL && skip > 0; skip--) q = q->next;
  for (; q != NULL && sc->cma_posted < SHM_CMA_MAX_POSTED && cma_eligible(comm, sc, q); q = q->next) {
    if (sc->tail - sc->head_seen >= f->nslots) {
      sc->head_seen = atomic_load_explicit(&f->ctrl->head, memory_order_acquire);
      if (sc->tail - sc->head_seen >= f->nslots) break;
    }
    weft__shm_slot_hdr *h = weft__shm_fifo_hdr(f, sc->tail);
    h->msg_bytes = q->bytes;
    h->bytes = WEFT__SHM_CMA_SLOT;
    h->ll_seq = (uint32_t)sc->ll_send_seq;
    h->fp = q->call->fp;
    sc->bulk_sent++;
    h->cma_src = (uint64_t)(uintptr_t)q->mem->host_view(q->mem, q->src, q->bytes);
    h->put_from = put_eligible(comm, sc, q) ? WEFT__SHM_PUT_FROM(q->bytes) : 0;
    atomic_store_explicit(&f->ctrl->tail, ++sc->tail, memory_order_release);
    sc->cma_posted++;
    *progressed = 1;
    weft__shm_ring_peer(sc);
  }
  return WEFT_SUCCESS;
}

/* After a message through the FIFO: prefetches for writing the header of the slot the next
 * message starts in, and its payload too when this message fit in prefetch_lines lines (a
 * next message of the same size will write them; larger payloads measured no faster), if
 * that slot is known free (weft__shm_prefetch_write says why), and not when such a payload
 * goes past the cache (weft__shm_payload_nt: two L3s, from 2 KiB, so with the default cap
 * only 2 KiB messages): the lines would cross between the L3s only to be written around
 * them. AMD EPYC (Zen 4) VM, 2 ranks, launches whose placement was two L3s before and
 * after, 11-20 of each, alternating with the payload prefetched (WEFT_SHM_PREFETCH 31
 * against 32 lines), us per call, medians: broadcast 2 KiB 0.568 -> 0.484, all-gather 4 KiB
 * 1.27 -> 1.21, reduce-scatter 4 KiB 1.24 -> 1.18; all-reduce 4 KiB (4 KiB messages, not
 * prefetched either way) 1.41 both. */
static void prefetch_next_slot(const shm_conn *sc, const weft__shm_fifo *f, size_t msg_bytes) {
  if (sc->tail - sc->head_seen >= f->nslots) return; /* the receiver may still read it */
  weft__shm_prefetch_write(weft__shm_fifo_hdr(f, sc->tail));
  if (msg_bytes <= WEFT__SHM_INLINE_BYTES || msg_bytes > (size_t)sc->prefetch_lines * WEFT__SHM_LINE ||
      weft__shm_payload_nt(sc->nt_out, msg_bytes))
    return;
  const char *payload = weft__shm_fifo_slot(f, sc->tail);
  for (size_t at = 0; at < msg_bytes; at += WEFT__SHM_LINE) weft__shm_prefetch_write(payload + at);
}

/* The next free slots of out for a piece of at most *n bytes of r from r->done (at most
 * weft__shm_piece_max), their header written, or NULL when the FIFO is full. The piece is
 * cut to the slots free now (*n set), or, when exact, NULL unless all of *n fits. *flags:
 * the copy flags of its payload (past the cache across L3s, shm_placement.h). The caller
 * fills the payload, then publish_slot. */
static char *claim_slot(shm_conn *sc, const weft__req *r, size_t *n, int exact, unsigned *flags) {
  weft__shm_fifo *f = &sc->out;
  uint64_t want = weft__shm_piece_slots(f, *n);
  if (f->nslots - (sc->tail - sc->head_seen) < want) {
    sc->head_seen = atomic_load_explicit(&f->ctrl->head, memory_order_acquire);
    uint64_t free_slots = f->nslots - (sc->tail - sc->head_seen);
    if (free_slots == 0 || (exact && free_slots < want)) return NULL;
    if (free_slots < want) *n = free_slots * f->slot_bytes;
  }
  weft__shm_slot_hdr *h = weft__shm_fifo_hdr(f, sc->tail);
  h->msg_bytes = r->bytes;
  h->bytes = (uint32_t)*n;
  h->ll_seq = (uint32_t)sc->ll_send_seq;
  h->fp = r->call->fp;
  if (r->done == 0) sc->bulk_sent++;
  *flags = weft__shm_payload_nt(sc->nt_out, r->bytes) ? WEFT__MEM_NT : 0;
  return weft__shm_fifo_data(f, h, sc->tail, r->bytes);
}

/* Publishes the slots claim_slot gave for the next n bytes of r (in place: the space
 * waited for them), and completes r at its last byte. */
static void publish_slot(shm_conn *sc, weft__req *r, size_t n) {
  sc->tail += weft__shm_piece_slots(&sc->out, n);
  atomic_store_explicit(&sc->out.ctrl->tail, sc->tail, memory_order_release);
  weft__shm_ring_peer(sc);
  r->done += n;
  if (r->done == r->bytes) {
    r->complete = 1;
    if (sc->prefetch_lines) prefetch_next_slot(sc, &sc->out, r->bytes);
  }
}

/* Fills free slots with the next pieces of r. */
static weft_status_t shm_send_test(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                       int *progressed) {
  shm_conn *sc = c->priv;
  if (r->complete) return WEFT_SUCCESS;
  if (sc->cma_posted == 0 && weft__shm_ll_send_eligible(sc, r))
    return weft__shm_ll_send_progress(comm, c, r, progressed);
  if (sc->cma_posted > 0 || cma_eligible(comm, sc, r)) return cma_send_progress(comm, c, sc, r, progressed);
  if (r->done == 0 && r->bytes > WEFT__SHM_INLINE_BYTES) weft__shm_payload_ready(sc, r->bytes);
  while (!r->complete) {
    size_t left = r->bytes - r->done, most = weft__shm_piece_max(&sc->out, sc->tail);
    size_t n = left < most ? left : most;
    unsigned flags;
    char *slot = claim_slot(sc, r, &n, 0, &flags);
    if (slot == NULL) return WEFT_SUCCESS;
    /* The space skips an empty message, which may come with a NULL buffer, and its bytes
     * are in the slot before tail says so. */
    weft__mem_copy(r->mem, slot, (const char *)r->src + r->done, n, flags);
    weft__mem_publish(r->mem, flags);
    publish_slot(sc, r, n);
    *progressed = 1;
  }
  return WEFT_SUCCESS;
}

/* SEND_SLOT (transport.h): the slots the next n bytes of r would have been copied into, for
 * a message that goes through the FIFO (not LL, not single copy), when a piece of n bytes
 * fits there now. */
static void *shm_send_slot(struct weft_comm *comm, weft__conn *c, weft__req *r, size_t n, unsigned *flags) {
  shm_conn *sc = c->priv;
  if (sc->cma_posted > 0 || n == 0 || n > weft__shm_piece_max(&sc->out, sc->tail) || n > r->bytes - r->done ||
      r->bytes <= WEFT__SHM_INLINE_BYTES || weft__shm_ll_send_eligible(sc, r) || cma_eligible(comm, sc, r))
    return NULL;
  if (r->done == 0) weft__shm_payload_ready(sc, r->bytes);
  return claim_slot(sc, r, &n, 1, flags);
}

static void shm_send_commit(struct weft_comm *comm, weft__conn *c, weft__req *r, size_t n) {
  (void)comm;
  publish_slot(c->priv, r, n);
}

/* Moves n bytes between local and address remote of process pid by single copy: into
 * local (process_vm_readv), or out of it when outward (process_vm_writev, which only reads
 * local), as often as it takes; 0, or an errno (EIO: the peer's buffer ended early). */
static int cma_move(pid_t pid, char *local, uint64_t remote, size_t n, int outward) {
  while (n > 0) {
    struct iovec l = {local, n};
    struct iovec r = {(void *)(uintptr_t)remote, n};
    ssize_t moved = outward ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (moved < 0 && errno == EINTR) continue;
    if (moved < 0) return errno;
    if (moved == 0) return EIO;
    local += moved;
    remote += (uint64_t)moved;
    n -= (size_t)moved;
  }
  return 0;
}

int weft__shm_cma_read(pid_t pid, void *dst, uint64_t src, size_t n) { return cma_move(pid, dst, src, n, 0); }

int weft__shm_cma_write(pid_t pid, uint64_t dst, const void *src, size_t n) {
  return cma_move(pid, (char *)(uintptr_t)src, dst, n, 1);
}

static weft_status_t cma_failed(struct weft_comm *comm, weft__conn *c, const shm_conn *sc,
                                int err) {
  if (err == ESRCH)
    return weft__error(comm, WEFT_ERR_REMOTE,
                       "rank %d: recv from peer %d: the peer's process %d is gone (single-copy "
                       "read: %s)", comm->rank, c->peer, (int)sc->pid, strerror(err));
  return weft__error(comm, err == EFAULT || err == EIO ? WEFT_ERR_REMOTE : WEFT_ERR_SYSTEM,
                     "rank %d: recv from peer %d: single-copy read of the peer's buffer "
                     "(process %d) failed: %s", comm->rank, c->peer, (int)sc->pid, strerror(err));
}

/* Reads up to SHM_CMA_CALL_BYTES more of the message described by h out of the sender,
 * straight into r->dst, or through the scratch when reducing; releases the slot after the
 * last byte, which completes the sender's request. */
static weft_status_t cma_recv_progress(struct weft_comm *comm, weft__conn *c, shm_conn *sc,
                                       weft__req *r, const weft__shm_slot_hdr *h,
                                       int *progressed) {
  if (!sc->cma_recv)
    return weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: recv from peer %d: the peer sent a "
                       "single-copy message though single copy is off", comm->rank, c->peer);
  /* Straight into the destination when its space has a host view; else, and when
   * reducing, through the scratch and the space. */
  char *view = r->acc == NULL ? r->mem->host_view(r->mem, r->dst, r->bytes) : NULL;
  if (view == NULL && *sc->scratch == NULL &&
      (*sc->scratch = aligned_alloc(WEFT__SHM_PAGE, SHM_CMA_REDUCE_PIECE)) == NULL)
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: recv from peer %d: out of memory",
                       comm->rank, c->peer);
  /* A put: ask for it at the first look, then read only the bytes before put_from while the
   * sender writes the rest. Where we reduce or have no host view we do not ask, and read it
   * whole: put_dst may change only once the sender is done with it (put_done). */
  uint64_t put_from = h->put_from, upto = r->bytes;
  if (put_from != 0 && view != NULL) {
    if (put_from >= r->bytes)
      return weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: recv from peer %d: corrupt single-copy slot (a put "
                         "from byte %llu of %zu)", comm->rank, c->peer, (unsigned long long)put_from, r->bytes);
    weft__shm_fifo_ctrl *ctrl = sc->in.ctrl;
    if (sc->put_asked != sc->head + 1) {
      sc->put_asked = sc->head + 1;
      sc->put_self = 0;
      ctrl->put_dst = (uint64_t)(uintptr_t)view;
      atomic_store_explicit(&ctrl->put_slot, sc->put_asked, memory_order_release);
      weft__shm_ring_peer(sc);
    }
    if (!sc->put_self) upto = put_from;
  }
  size_t budget = SHM_CMA_CALL_BYTES;
  int moved = 0;
  for (;;) {
    if (r->done == upto && upto < r->bytes) { /* ours are read: the sender's part? */
      if (atomic_load_explicit(&sc->in.ctrl->put_done, memory_order_acquire) != sc->head + 1) break;
      if (sc->in.ctrl->put_errno == 0) r->done = r->bytes;
      else sc->put_self = 1; /* the sender wrote nothing: we read the rest */
      upto = r->bytes;
      moved = 1;
    }
    if (r->done == r->bytes || budget == 0) break;
    size_t n = upto - r->done < budget ? upto - r->done : budget;
    size_t piece = view == NULL ? SHM_CMA_REDUCE_PIECE : upto < r->bytes ? SHM_CMA_PUT_PIECE : SHM_CMA_READ_PIECE;
    if (n > piece) n = piece;
    void *to = view == NULL ? *sc->scratch : view + r->done;
    int err = weft__shm_cma_read(sc->pid, to, h->cma_src + r->done, n);
    if (err != 0) return cma_failed(comm, c, sc, err);
    if (view == NULL) weft__req_deliver(comm, r, to, n);
    else r->done += n;
    budget -= n;
    moved = 1;
  }
  if (moved) *progressed = 1;
  if (r->done < r->bytes) return WEFT_SUCCESS;
  atomic_store_explicit(&sc->in.ctrl->head, ++sc->head, memory_order_release);
  weft__shm_ring_peer(sc);
  r->complete = 1;
  return WEFT_SUCCESS;
}

/* The bulk FIFO is empty where r waits: if an LL message came instead, the peer sent one
 * of another size. Looks at the FIFO once more after seeing LL data, since a bulk message
 * sent before that LL one must be visible now. */
static weft_status_t check_ll_instead(struct weft_comm *comm, weft__conn *c, shm_conn *sc,
                                      const weft__req *r) {
  if (!sc->ll_recv_on || !weft__shm_ll_arrived(sc)) return WEFT_SUCCESS;
  sc->tail_seen = atomic_load_explicit(&sc->in.ctrl->tail, memory_order_acquire);
  if (sc->tail_seen != sc->head) return WEFT_SUCCESS;
  return weft__shm_ll_note_mismatch(comm, c, sc, r);
}

/* The first slot of r's message: of r's call, and sent after every LL chunk we have read
 * (else an LL message of an earlier call is still unreceived: it was r's match). */
static weft_status_t check_first_slot(struct weft_comm *comm, weft__conn *c, shm_conn *sc,
                                      const weft__req *r, const weft__shm_slot_hdr *h) {
  if (h->ll_seq != (uint32_t)sc->ll_recv_seq) {
    weft__fp theirs = sc->in.ll_notes[sc->ll_recv_seq % WEFT__SHM_LL_BUFS].fp;
    return weft__fp_mismatch(comm, c->peer, &r->call->fp, &theirs);
  }
  if (!weft__fp_equal(&h->fp, &r->call->fp)) return weft__fp_mismatch(comm, c->peer, &r->call->fp, &h->fp);
  sc->bulk_recvd++;
  return WEFT_SUCCESS;
}

/* Hands every filled slot of r's message to r, straight out of shared memory. */
static weft_status_t shm_recv_test(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                       int *progressed) {
  shm_conn *sc = c->priv;
  weft__shm_fifo *f = &sc->in;
  if (r->complete) return WEFT_SUCCESS;
  if (weft__shm_ll_recv_eligible(sc, r)) return weft__shm_ll_recv_progress(comm, c, r, progressed);
  for (;;) {
    if (sc->head == sc->tail_seen) {
      sc->tail_seen = atomic_load_explicit(&f->ctrl->tail, memory_order_acquire);
      if (sc->head != sc->tail_seen) continue;
      if (r->done == 0 && weft__shm_cross_check_due(sc)) return check_ll_instead(comm, c, sc, r);
      return WEFT_SUCCESS;
    }
    weft__shm_slot_hdr *h = weft__shm_fifo_hdr(f, sc->head);
    size_t n = h->bytes;
    if (r->done == 0) WEFT_TRY(check_first_slot(comm, c, sc, r, h));
    if (h->msg_bytes != r->bytes)
      return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                         "rank %d: recv from peer %d: message size mismatch: peer sent %zu bytes, "
                         "expected %zu", comm->rank, c->peer, (size_t)h->msg_bytes, r->bytes);
    if (h->bytes == WEFT__SHM_CMA_SLOT) return cma_recv_progress(comm, c, sc, r, h, progressed);
    if (n > weft__shm_piece_max(f, sc->head) || n > r->bytes - r->done)
      return weft__error(comm, WEFT_ERR_INTERNAL,
                         "rank %d: recv from peer %d: corrupt shm slot (%zu bytes)", comm->rank,
                         c->peer, n);
    if (r->done == 0 && r->bytes > WEFT__SHM_INLINE_BYTES) weft__shm_payload_map(sc, r->bytes);
    weft__req_deliver(comm, r, weft__shm_fifo_data(f, h, sc->head, r->bytes), n);
    sc->head += weft__shm_piece_slots(f, n);
    atomic_store_explicit(&f->ctrl->head, sc->head, memory_order_release);
    weft__shm_ring_peer(sc);
    *progressed = 1;
    if (r->done == r->bytes) {
      r->complete = 1;
      return WEFT_SUCCESS;
    }
  }
}

/* ---- hooks ------------------------------------------------------------------------------ */

/* This rank's doorbell (the first line of its segment), or NULL without shm peers. */
static weft__shm_doorbell *own_bell(struct weft_comm *comm) {
  shm_state *st = weft__shm_state_of(comm);
  return st != NULL && st->own.base != NULL ? (weft__shm_doorbell *)st->own.base : NULL;
}

static int shm_sleep_begin(struct weft_comm *comm, uint32_t *bell) {
  weft__shm_doorbell *d = own_bell(comm);
  if (d == NULL) return 0;
  atomic_store_explicit(&d->sleeping, 1, memory_order_relaxed);
  /* announce before the caller looks once more; peers that ring us without a fence count on
   * membarrier's (shm_doorbell.h): if it fails, a nap instead of a sleep they might miss */
  if (!d->membarrier) atomic_thread_fence(memory_order_seq_cst);
  else if (weft__shm_membarrier() != 0) {
    atomic_store_explicit(&d->sleeping, 0, memory_order_relaxed);
    return 0;
  }
  *bell = atomic_load_explicit(&d->bell, memory_order_acquire);
  return 1;
}

/* At most the state's sleep_max_ns at a time: a ring missed despite the fences (it should
 * not happen, shm_doorbell.h) costs at most that. */
static void shm_sleep(struct weft_comm *comm, uint32_t bell, uint64_t max_ns) {
  weft__shm_doorbell *d = own_bell(comm);
  uint64_t cap = weft__shm_state_of(comm)->sleep_max_ns;
  if (d != NULL) weft__futex_wait(&d->bell, bell, max_ns < cap ? max_ns : cap);
}

static void shm_sleep_end(struct weft_comm *comm) {
  weft__shm_doorbell *d = own_bell(comm);
  if (d != NULL) atomic_store_explicit(&d->sleeping, 0, memory_order_relaxed);
}

static void shm_yielding(struct weft_comm *comm, int on) {
  weft__shm_doorbell *d = own_bell(comm);
  if (d != NULL) atomic_store_explicit(&d->yielding, (uint32_t)on, memory_order_relaxed);
}

static int shm_peer_on_cpu(const weft__conn *c) {
  const weft__shm_doorbell *d = ((const shm_conn *)c->priv)->peer_bell;
  return d != NULL && !atomic_load_explicit(&d->yielding, memory_order_relaxed) &&
         !atomic_load_explicit(&d->sleeping, memory_order_relaxed);
}

/* 1 if pid no longer runs (gone, or a zombie nobody has reaped yet). */
static int process_dead(int pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64], stat[256];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  size_t n = fread(stat, 1, sizeof(stat) - 1, f);
  fclose(f);
  stat[n] = '\0';
  const char *close_paren = strrchr(stat, ')');
  return close_paren != NULL && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

/* A peer on this host whose process is gone has failed (its bytes will never come). */
static int shm_peer_failed(struct weft_comm *comm, int peer, const char **why) {
  if (!process_dead(comm->peers[peer].pid)) return 0;
  *why = "exited (its process is gone)";
  return 1;
}

/* Fitted on the family-6 model-167 Intel VM (2 vCPUs, 2026-12-03): the medians of four
 * `weft-tune --measure` runs (alpha 6.2-7.1, beta 0.138-0.159, gamma 0-0.006, oversub_alpha
 * 12.1-13.1, oversub_beta 1.78-1.95); three later runs gave oversub_alpha 12.5, 2.6 and 1.9,
 * whose choices differ from this row's by one size step at each crossover. With it the
 * 4-rank all-reduce on the 2 cores runs Rabenseifner from 64 KiB where the stored row below
 * keeps recursive doubling to 128 KiB: 3 alternating launches, us per call, 64 KiB 17.8
 * against 28.3, 128 KiB 32.7 against 61.6, 16 KiB and 256 KiB-2 MiB within 2%. 2-rank
 * choices are the same under both rows; 3 ranks take the ring from 32 KiB (was 128 KiB),
 * 1.1-1.3x slower at 32-64 KiB (perf/bench/RESULTS.md). */
static const weft__transport_model_fit shm_fits[] = {
    {"GenuineIntel 6/167", {6.9, 0.155, 0.0, 12.2, 1.88}},
    {NULL, {0, 0, 0, 0, 0}},
};

/* Fitted to all_reduce_perf / all_gather_perf / alltoall_perf -z 1 (p50 of single calls,
 * medians of 3-5 interleaved runs) on the 2-core VM weft is developed on. Its per-step cost
 * swings with the load of other jobs: 2-rank all-reduce of 8 B took 38 us with the ring
 * (2 steps) against 25.5 us with recursive doubling (1 step) at load 5-9, so alpha ~12 us,
 * and 7.0 against 6.7 us when quiet, so alpha < 1 us; alpha = 6 puts the crossover between
 * the two measured ones (32 KiB: 40.8 against 30.9 us loaded, 11.6 against 13.2 us quiet).
 * 512 KiB took 104 us with the ring, hence beta ~0.1 us/KiB; with 4 ranks on the 2 cores
 * the per-byte cost doubled (ring: 160 us at 128 KiB). With more ranks than cores a step
 * also waits for its peer to be scheduled: `weft-tune --measure` on the AMD EPYC VM of
 * 2026-11-29 (4 ranks on 2 cores, the choices' fit) gave 37-41 us more per step, and with
 * 40 the 4-rank all-reduce, all-gather and reduce-scatter keep their log-depth algorithms
 * up to 256 KiB, 32 KiB and 8 KiB (block) where the ring took over from 64 KiB, 8 KiB and
 * 2 KiB: 1.3-2.2x faster at all-reduce 64-128 KiB, all-gather 32-256 KiB (whole buffer) and
 * reduce-scatter 8-32 KiB (3 alternating rounds), no slower elsewhere (16 KiB-1 MiB). */
const weft__transport weft__transport_shm = {
    .name = "shm",
    .caps = WEFT__TRANSPORT_CAP_RECV_REDUCE | WEFT__TRANSPORT_CAP_INLINE | WEFT__TRANSPORT_CAP_PEER_MEMORY |
            WEFT__TRANSPORT_CAP_WAIT | WEFT__TRANSPORT_CAP_LIVENESS | WEFT__TRANSPORT_CAP_PLACEMENT |
            WEFT__TRANSPORT_CAP_NT_LANDING | WEFT__TRANSPORT_CAP_SEND_SLOT,
    .model = {6.0, 0.10, 0.05, 40.0, 2.0},
    .fits = shm_fits,
    .card_bytes = sizeof(weft__shm_card),
    .can_connect = weft__shm_can_connect,
    .listen = weft__shm_listen,
    .connect = weft__shm_connect,
    .close = weft__shm_close,
    .send_test = shm_send_test,
    .recv_test = shm_recv_test,
    .send_slot = shm_send_slot,
    .send_commit = shm_send_commit,
    .sleep_begin = shm_sleep_begin,
    .sleep = shm_sleep,
    .sleep_end = shm_sleep_end,
    .yielding = shm_yielding,
    .peer_on_cpu = shm_peer_on_cpu,
    .peer_failed = shm_peer_failed,
    .before_collective = weft__shm_placement_check,
    .before_min_bytes = WEFT__SHM_PROBE_FIRST_MIN,
};

/* ib_transport.c: the ib transport's data path (transports/transport.h) over the net_ib
 * engine (ib_net.h); its setup is in ib_tr_setup.c, the slicing in ib_transport.h.
 *
 * Send: slice k of the head request is copied from the user's buffer, through its memory
 * space, into the registered staging slot k % IBT_SLOTS (slice 0 behind its call header,
 * ib_transport.h), then handed to weft__ib_isend, which returns no request until the
 * receiver's clear-to-send for it has come (the receiver drives, as in NCCL's net_ib); a
 * slot is refilled once its slice's send completed.
 * Receive: the head request posts weft__ib_irecv for up to IBT_SLOTS slices into its
 * staging slots (each posts a clear-to-send into the sender's FIFO); slice 0's call header
 * is compared with the request's call before anything lands (a mismatch: weft__fp_mismatch,
 * "rank 1: call mismatch: all_reduce #7 (...) does not match rank 0's all_reduce #7 (...)");
 * a completed slice is handed to the core with weft__req_land, which copies or reduces it
 * into the destination through the space (so receives reduce on arrival: RECV_REDUCE), and
 * its slot is reposted. Bytes moved per message: B + 32 (slice 0's call header) once over the wire,
 * plus one copy on each side.
 * Registration happens once per connection (the staging) and for registered windows
 * (reg): a slice after the first inside a window skips the copy on its side (ib_transport.h). Other user
 * buffers are never registered, so nothing is pinned behind the caller's back and no
 * registration cache can go stale.
 *
 * Nothing here blocks: the engine's calls return at once (a NULL request means "not yet").
 * Every wait has the engine's deadline (the communicator's timeout from a request's post:
 * a clear-to-send or a completion that does not come fails the request), and the core's
 * own. Errors name this rank, the peer and the operation, with the engine's message after
 * it (the verbs status string, the QP, the request's sequence number), e.g. "rank 0: ib
 * send to peer 1: ib: rank 0: peer rank 1 (weftemu0:1 -> QP 70401): send #3 (524288 bytes,
 * RDMA write with immediate on QP 0 of 1) failed: remote access error (status 10, ...)".
 * After an error the peer's connection is dead: every later call fails again.
 * Thread safety: the core calls these under the communicator's lock. */
#include <stdio.h>
#include <string.h>

#include "lib/comm.h"
#include "lib/status.h"
#include "mem/space.h"
#include "transports/ib/ib_transport.h"

static weft_status_t ibt_dead(struct weft_comm *comm, ibt_peer *pp) {
  return weft__error(comm, pp->dead, "rank %d: ib connection to peer %d unusable after an earlier error",
                     comm->rank, pp->peer);
}

/* [*off, *off + *len) of slice k of a bytes-byte message: slice 0 is the first
 * IBT_FIRST_BYTES at most (behind the call header), the others st->slice at most. */
static void slice_of(const ibt_state *st, size_t bytes, size_t k, size_t *off, size_t *len) {
  size_t cap = k == 0 ? IBT_FIRST_BYTES : st->slice;
  *off = k == 0 ? 0 : IBT_FIRST_BYTES + (k - 1) * st->slice;
  *len = bytes - *off < cap ? bytes - *off : cap;
}

/* The start of a slice's bytes in staging slot `slot` of stage (sstage or rstage); the
 * slot's call header, for slice 0, is the sizeof(ibt_hdr) bytes in front. */
static char *slot_data(const ibt_state *st, char *stage, int slot) {
  return stage + (size_t)slot * (IBT_SLOT_ROOM + st->slice) + IBT_SLOT_ROOM;
}

/* Finds r's transfer, starting one for a new message. A message dropped while slices of it
 * were in flight (an error or abort elsewhere) leaves the engine's sequence mid-message:
 * the connection cannot be used again. */
static weft_status_t xfer_for(struct weft_comm *comm, const ibt_state *st, ibt_peer *pp, ibt_xfer *x,
                              weft__req *r, const char *op) {
  if (x->req == r && r->done == x->done) return WEFT_SUCCESS;
  if (x->req != NULL && x->next_post > x->next_done) {
    pp->dead = weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: ib %s peer %d: a message was abandoned with "
                           "slices in flight; the connection is unusable", comm->rank, op, pp->peer);
    return pp->dead;
  }
  memset(x, 0, sizeof *x);
  x->req = r;
  x->nslices = 1 + (r->bytes <= IBT_FIRST_BYTES ? 0 : (r->bytes - IBT_FIRST_BYTES + st->slice - 1) / st->slice);
  r->done = 0;
  return WEFT_SUCCESS;
}

static void xfer_finish(ibt_xfer *x, weft__req *r) {
  r->complete = 1;
  x->req = NULL;
}

/* ---------------------------------------------------------------------------------------
 * Sending */

/* Completes the sends of slices in order (r->done grows by whole slices, a prefix of the
 * message, as copy_to needs: lib/req.c); *progressed when one completed. */
static weft_status_t send_reap(struct weft_comm *comm, const ibt_state *st, ibt_peer *pp, ibt_xfer *x, weft__req *r,
                               int *progressed) {
  while (x->next_done < x->next_post) {
    int slot = (int)(x->next_done % IBT_SLOTS), done = 0;
    weft__error_quiet(1);
    weft_status_t s = weft__ib_test(x->rq[slot], &done, NULL);
    weft__error_quiet(0);
    if (s != WEFT_SUCCESS) return weft__ibt_fail(comm, pp, "send to", s);
    if (!done) break;
    size_t off, len;
    slice_of(st, r->bytes, x->next_done, &off, &len);
    r->done += len;
    x->rq[slot] = NULL;
    x->next_done++;
    *progressed = 1;
  }
  return WEFT_SUCCESS;
}

static weft_status_t ibt_send_test(struct weft_comm *comm, weft__conn *c, weft__req *r, int *progressed) {
  ibt_peer *pp = c->priv;
  ibt_state *st = weft__ibt_state_of(comm);
  if (pp->dead) return ibt_dead(comm, pp);
  ibt_xfer *x = &pp->send;
  WEFT_TRY(xfer_for(comm, st, pp, x, r, "send to"));
  WEFT_TRY(send_reap(comm, st, pp, x, r, progressed));
  while (x->next_post < x->nslices && x->next_post - x->next_done < IBT_SLOTS) {
    int slot = (int)(x->next_post % IBT_SLOTS), first = x->next_post == 0;
    char *buf = slot_data(st, pp->sstage, slot);
    weft__ib_mr *mr = pp->smr;
    size_t off, len;
    slice_of(st, r->bytes, x->next_post, &off, &len);
    char *view = !first && st->wins != NULL && len > 0
                     ? r->mem->host_view(r->mem, (const char *)r->src + off, len) : NULL;
    weft__ib_mr *wmr = view != NULL ? weft__ibt_window_mr(st, view, len) : NULL;
    if (wmr != NULL) { /* inside a registered window: straight from the user's buffer */
      buf = view;
      mr = wmr;
    } else if (!x->staged[slot]) { /* the slot's previous slice is done: refill it */
      weft__mem_copy(r->mem, buf, (const char *)r->src + off, len, 0);
      if (!(r->mem->flags & WEFT__MEM_SYNC)) r->mem->wait(r->mem);
      if (first) {
        ibt_hdr h = {.fp = r->call->fp, .bytes = r->bytes, .magic = IBT_HDR_MAGIC};
        memcpy(buf - sizeof h, &h, sizeof h);
      }
      x->staged[slot] = 1;
    }
    size_t wire = first ? sizeof(ibt_hdr) + len : len;
    if (first) buf -= sizeof(ibt_hdr);
    weft__error_quiet(1);
    weft_status_t s = weft__ib_isend(pp->sc, buf, wire, first ? IBT_TAG_FIRST : (uint32_t)r->bytes, mr,
                                     &x->rq[slot]);
    weft__error_quiet(0);
    if (s != WEFT_SUCCESS) return weft__ibt_fail(comm, pp, "send to", s);
    if (x->rq[slot] == NULL) break; /* no clear-to-send yet */
    st->window_sends += wmr != NULL;
    x->staged[slot] = 0;
    x->next_post++;
    *progressed = 1;
  }
  WEFT_TRY(send_reap(comm, st, pp, x, r, progressed));
  if (x->next_done == x->nslices) xfer_finish(x, r);
  x->done = r->done;
  return WEFT_SUCCESS;
}

/* ---------------------------------------------------------------------------------------
 * Receiving */

static weft_status_t recv_post(struct weft_comm *comm, ibt_state *st, ibt_peer *pp, ibt_xfer *x, weft__req *r,
                               int *progressed) {
  while (x->next_post < x->nslices && x->next_post - x->next_done < IBT_SLOTS) {
    int slot = (int)(x->next_post % IBT_SLOTS), first = x->next_post == 0;
    size_t off, len;
    slice_of(st, r->bytes, x->next_post, &off, &len);
    char *buf = slot_data(st, pp->rstage, slot);
    weft__ib_mr *mr = pp->rmr;
    /* A copy into a registered window is written there by the peer's RDMA directly, once
     * slice 0's header said the peer is in the same call. */
    char *view = !first && st->wins != NULL && r->acc == NULL && len > 0
                     ? r->mem->host_view(r->mem, (char *)r->dst + off, len) : NULL;
    weft__ib_mr *wmr = view != NULL ? weft__ibt_window_mr(st, view, len) : NULL;
    if (wmr != NULL && !x->checked) break; /* posted after the check (ibt_recv_test) */
    x->direct[slot] = wmr != NULL;
    if (wmr != NULL) buf = view, mr = wmr;
    /* Slice 0: its header, and room for a whole first slice, so that a peer sending another
     * size is caught by the header check here, not refused by the engine at the sender. */
    size_t room = first ? sizeof(ibt_hdr) + IBT_FIRST_BYTES : len;
    if (first) buf -= sizeof(ibt_hdr);
    weft__error_quiet(1);
    weft_status_t s = weft__ib_irecv(pp->rc, buf, room, first ? IBT_TAG_FIRST : (uint32_t)r->bytes, mr,
                                     &x->rq[slot]);
    weft__error_quiet(0);
    if (s != WEFT_SUCCESS) return weft__ibt_fail(comm, pp, "receive from", s);
    if (x->rq[slot] == NULL) break; /* the engine's request slots are all busy */
    st->window_recvs += wmr != NULL;
    x->next_post++;
    *progressed = 1;
  }
  return WEFT_SUCCESS;
}

/* Checks slice 0's header (the got bytes at `at`, in staging) against r's call and size before
 * any of the message lands. Errors (the peer marked dead): WEFT_ERR_INVALID_USAGE, a call
 * mismatch (weft__fp_mismatch: this rank, the peer, both calls), a size mismatch, or a
 * slice without a header (the two ends out of step), each naming this rank and the peer. */
static weft_status_t check_header(struct weft_comm *comm, ibt_peer *pp, const weft__req *r, const char *at,
                                  size_t got) {
  ibt_hdr h;
  if (got >= sizeof h) memcpy(&h, at, sizeof h);
  if (got < sizeof h || h.magic != IBT_HDR_MAGIC)
    return pp->dead = weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: ib receive from peer %d: the first "
                                  "slice of a %zu-byte message (%zu bytes) has no call header: the two ranks "
                                  "are out of step", comm->rank, pp->peer, r->bytes, got);
  if (!weft__fp_equal(&h.fp, &r->call->fp))
    return pp->dead = weft__fp_mismatch(comm, pp->peer, &r->call->fp, &h.fp);
  if (h.bytes != r->bytes)
    return pp->dead = weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: ib receive from peer %d: message size "
                                  "mismatch: the peer sends %llu bytes, this rank expects %zu", comm->rank,
                                  pp->peer, (unsigned long long)h.bytes, r->bytes);
  return WEFT_SUCCESS;
}

static weft_status_t ibt_recv_test(struct weft_comm *comm, weft__conn *c, weft__req *r, int *progressed) {
  ibt_peer *pp = c->priv;
  ibt_state *st = weft__ibt_state_of(comm);
  if (pp->dead) return ibt_dead(comm, pp);
  ibt_xfer *x = &pp->recv;
  WEFT_TRY(xfer_for(comm, st, pp, x, r, "receive from"));
  WEFT_TRY(recv_post(comm, st, pp, x, r, progressed));
  while (x->next_done < x->next_post) {
    int slot = (int)(x->next_done % IBT_SLOTS), done = 0;
    size_t got = 0, off, len;
    weft__error_quiet(1);
    weft_status_t s = weft__ib_test(x->rq[slot], &done, &got);
    weft__error_quiet(0);
    if (s != WEFT_SUCCESS) return weft__ibt_fail(comm, pp, "receive from", s);
    if (!done) break;
    x->rq[slot] = NULL;
    slice_of(st, r->bytes, x->next_done, &off, &len);
    if (x->next_done == 0) {
      WEFT_TRY(check_header(comm, pp, r, slot_data(st, pp->rstage, slot) - sizeof(ibt_hdr), got));
      got -= sizeof(ibt_hdr);
      x->checked = 1;
    }
    if (got != len) {
      pp->dead = weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: ib receive from peer %d: message size "
                             "mismatch: slice %zu of a %zu-byte message brought %zu bytes, expected %zu",
                             comm->rank, pp->peer, x->next_done, r->bytes, got, len);
      return pp->dead;
    }
    if (!x->direct[slot]) weft__req_land(r, off, slot_data(st, pp->rstage, slot), len);
    r->done += len;
    x->next_done++;
    *progressed = 1;
    WEFT_TRY(recv_post(comm, st, pp, x, r, progressed));
  }
  if (x->next_done == x->nslices) xfer_finish(x, r);
  x->done = r->done;
  return WEFT_SUCCESS;
}

/* The cost row, measured on the verbs emulator only (no HCA has run weft yet): 2 ranks on
 * 2 emulated hosts (network namespaces) of the 2-core VM, all_reduce_perf, perf/
 * ib_emulated.sh: about 22 us at 8 B (alpha ~20 us: the receiver's clear-to-send, then the
 * write with immediate, each through an emulator thread) and 2.3-4 GB/s bus bandwidth at
 * 256 KiB-4 MiB across loaded runs (beta ~0.4 us/KiB, the slower end: process_vm_writev plus
 * a staging copy on each side).
 * An HCA would be far faster; these keep the tuner's choices sane on what runs here, and
 * WEFT_TUNER_MODEL=ib:alpha,beta,gamma,oversub_alpha,oversub_beta replaces them. */
const weft__transport weft__transport_ib = {
    .name = "ib",
    .caps = WEFT__TRANSPORT_CAP_RECV_REDUCE | WEFT__TRANSPORT_CAP_NT_LANDING,
    .model = {20.0, 0.4, 0.05, 0.0, 1.5},
    .card_bytes = sizeof(ibt_card),
    .can_connect = weft__ibt_can_connect,
    .listen = weft__ibt_listen,
    .connect = weft__ibt_connect,
    .close = weft__ibt_close,
    .reg = weft__ibt_reg,
    .dereg = weft__ibt_dereg,
    .send_test = ibt_send_test,
    .recv_test = ibt_recv_test,
};

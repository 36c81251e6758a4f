/* shm_ll.c: the LL protocol of the shm transport (format and reasoning in shm_ll.h).
 *
 * Send: for each chunk of the head request, wait for its buffer's credit (ll_done >= seq -
 * WEFT__SHM_LL_BUFS, re-read only when the cached copy says so), copy 56 bytes per line and
 * release-store the line's flag; after the message's last chunk, prefetch the next chunk's
 * lines for writing (prefetch_next_chunk); ring the peer's doorbell once per call.
 * Receive: read the flags of the chunk's next lines while they carry the expected seq,
 * gather their data into a contiguous stage (a message of one line is handed over straight
 * from its line), hand it to the request in one piece (one copy or reduce call instead of
 * one per 56 bytes, which measured 3x slower at 2 KiB), after the last line of every
 * WEFT__SHM_LL_CREDIT_BATCH-th chunk store its seq into ll_done, and after each chunk
 * prefetch the line of the chunk WEFT__SHM_LL_RECV_PREFETCH_AHEAD later. */
#include <string.h>
#include "lib/comm.h"
#include "lib/status.h"
#include "mem/space.h"
#include "transports/shm/shm_conn.h"
#include "transports/shm/shm_ll.h"

/* Writes chunk seq of r (its bytes from r->done) into its buffer. */
static void write_chunk(weft__shm_conn *sc, weft__req *r, uint64_t seq) {
  size_t n = r->bytes - r->done < WEFT__SHM_LL_CHUNK ? r->bytes - r->done : WEFT__SHM_LL_CHUNK;
  weft__shm_ll_line *line = weft__shm_ll_buf(&sc->out, seq);
  weft__shm_ll_note *note = &sc->out.ll_notes[seq % WEFT__SHM_LL_BUFS];
  note->fp = r->call->fp; /* before the flags (release), so a receiver that sees one sees it */
  note->msg_bytes = r->bytes;
  note->bulk_sent = sc->bulk_sent;
  uint64_t flag = weft__shm_ll_flag(seq, weft__shm_ll_check(r, sc->bulk_sent));
  const char *src = (const char *)r->src + r->done;
  size_t at = 0;
  do { /* an empty message still takes one line: its flag */
    size_t k = n - at < WEFT__SHM_LL_LINE_DATA ? n - at : WEFT__SHM_LL_LINE_DATA;
    /* A whole line's copy has a constant size: a few moves inline for host memory, not a
     * memcpy call per line. With take_lines doing the same, 2 ranks, 15 alternating launch
     * pairs: messages of 256-512 B (5-10 lines) 1.08-1.22x faster (all-reduce, all-gather,
     * broadcast); at 512 B, where LL had lost to the bulk FIFO by 1.16-1.41x on the Zen 3
     * VM, the two now tie (8-11 wins of 15), so WEFT__LL_DEFAULT_THRESHOLD stays. */
    if (k == WEFT__SHM_LL_LINE_DATA) weft__mem_copy(r->mem, line->data, src + at, WEFT__SHM_LL_LINE_DATA, 0);
    else weft__mem_copy(r->mem, line->data, src + at, k, 0); /* skips an empty message's NULL */
    weft__mem_publish(r->mem, 0);                        /* the data before its flag */
    atomic_store_explicit(&line->flag, flag, memory_order_release);
    line++;
    at += k;
  } while (at < n);
  r->done += n;
}

/* After a message: prefetches for writing the lines the next chunk will write
 * (weft__shm_prefetch_write says why), as many as this message's first chunk took (a loop
 * of broadcasts or a training step's all-reduces repeats its sizes), when that chunk's
 * credit is already known. */
static void prefetch_next_chunk(const weft__shm_conn *sc, size_t msg_bytes) {
  uint64_t seq = sc->ll_send_seq;
  if (seq > sc->ll_done_seen + WEFT__SHM_LL_BUFS) return; /* its buffer may still be read */
  size_t first = msg_bytes < WEFT__SHM_LL_CHUNK ? msg_bytes : WEFT__SHM_LL_CHUNK;
  size_t nlines = first == 0 ? 1 : (first + WEFT__SHM_LL_LINE_DATA - 1) / WEFT__SHM_LL_LINE_DATA;
  if (nlines > (size_t)sc->prefetch_lines) nlines = (size_t)sc->prefetch_lines;
  const weft__shm_ll_line *line = weft__shm_ll_buf(&sc->out, seq);
  for (size_t i = 0; i < nlines; i++) weft__shm_prefetch_write(&line[i]);
}

weft_status_t weft__shm_ll_send_progress(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                         int *progressed) {
  weft__shm_conn *sc = c->priv;
  int wrote = 0;
  while (!r->complete) {
    uint64_t seq = sc->ll_send_seq;
    if (seq > sc->ll_done_seen + WEFT__SHM_LL_BUFS) {
      sc->ll_done_seen = atomic_load_explicit(&sc->out.ctrl->ll_done, memory_order_acquire);
      if (seq > sc->ll_done_seen + WEFT__SHM_LL_BUFS) break;
    }
    write_chunk(sc, r, seq);
    sc->ll_send_seq = seq + 1;
    wrote = 1;
    if (r->done == r->bytes) {
      r->complete = 1;
      if (sc->prefetch_lines) prefetch_next_chunk(sc, r->bytes);
    }
  }
  if (wrote) {
    *progressed = 1;
    weft__shm_ring_peer(sc);
  }
  return WEFT_SUCCESS;
}

int weft__shm_ll_arrived(const weft__shm_conn *sc) {
  const weft__shm_ll_line *line = weft__shm_ll_buf(&sc->in, sc->ll_recv_seq);
  return weft__shm_ll_ready(atomic_load_explicit(&line->flag, memory_order_acquire),
                            sc->ll_recv_seq);
}

/* Nothing arrived on LL where r waits: if the bulk FIFO holds a message, the peer sent one
 * of another size (a message goes LL or bulk by its size). Checks LL once more after
 * seeing the FIFO, since an LL message sent before that bulk one must be visible now. */
static weft_status_t check_bulk_instead(struct weft_comm *comm, weft__conn *c,
                                        weft__shm_conn *sc, const weft__req *r) {
  uint64_t tail = atomic_load_explicit(&sc->in.ctrl->tail, memory_order_acquire);
  if (tail == sc->head || weft__shm_ll_arrived(sc)) return WEFT_SUCCESS;
  const weft__shm_slot_hdr *h = weft__shm_fifo_hdr(&sc->in, sc->head);
  if (!weft__fp_equal(&h->fp, &r->call->fp)) return weft__fp_mismatch(comm, c->peer, &r->call->fp, &h->fp);
  return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                     "rank %d: recv from peer %d: message size mismatch: peer sent %zu bytes, "
                     "expected %zu", comm->rank, c->peer, (size_t)h->msg_bytes, r->bytes);
}

weft_status_t weft__shm_ll_note_mismatch(struct weft_comm *comm, weft__conn *c,
                                         const weft__shm_conn *sc, const weft__req *r) {
  const weft__shm_ll_note *note = &sc->in.ll_notes[sc->ll_recv_seq % WEFT__SHM_LL_BUFS];
  weft__fp theirs = note->fp;
  if (note->bulk_sent != sc->bulk_recvd) {
    /* The peer had started a bulk message that we never received: that one was r's match. */
    const weft__shm_slot_hdr *h = weft__shm_fifo_hdr(&sc->in, sc->head);
    theirs = h->fp;
  }
  if (!weft__fp_equal(&theirs, &r->call->fp)) return weft__fp_mismatch(comm, c->peer, &r->call->fp, &theirs);
  return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                     "rank %d: recv from peer %d: message size mismatch: peer sent %llu bytes, "
                     "expected %zu", comm->rank, c->peer, (unsigned long long)note->msg_bytes,
                     r->bytes);
}

/* Called after a chunk's last line: returns the credit of the chunks consumed since the
 * last return when they make a batch (shm_ll.h, WEFT__SHM_LL_CREDIT_BATCH), and prefetches
 * the first line of chunk seq + WEFT__SHM_LL_RECV_PREFETCH_AHEAD (shm_ll.h says why). */
static void chunk_consumed(weft__shm_conn *sc) {
  if (sc->ll_recv_seq % WEFT__SHM_LL_CREDIT_BATCH == 0) {
    atomic_store_explicit(&sc->in.ctrl->ll_done, sc->ll_recv_seq, memory_order_release);
    weft__shm_ring_peer(sc);
  }
  sc->ll_recv_seq++;
  __builtin_prefetch(weft__shm_ll_buf(&sc->in, sc->ll_recv_seq + WEFT__SHM_LL_RECV_PREFETCH_AHEAD - 1), 0, 3);
}

/* Checks a ready line's flag names r's call and size (check: weft__fp_check32 of them). */
static weft_status_t check_line(struct weft_comm *comm, weft__conn *c, const weft__req *r,
                                uint64_t flag, uint32_t check) {
  if ((uint32_t)(flag >> 32) == check) return WEFT_SUCCESS;
  return weft__shm_ll_note_mismatch(comm, c, c->priv, r);
}

/* Hands r the ready lines among the nlines from `line` on (chunk_left bytes of the current
 * chunk); returns how many were ready in *ready. */
static weft_status_t take_lines(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                const weft__shm_ll_line *line, size_t nlines, size_t chunk_left,
                                uint64_t seq, size_t *ready) {
  char stage[WEFT__SHM_LL_CHUNK];
  const weft__shm_conn *sc = c->priv;
  uint32_t check = 0; /* computed once a line is there: not on every empty look */
  size_t k = 0;
  for (; k < nlines; k++) {
    uint64_t flag = atomic_load_explicit(&line[k].flag, memory_order_acquire);
    if (!weft__shm_ll_ready(flag, seq)) break;
    if (k == 0) check = weft__shm_ll_check(r, sc->bulk_recvd);
    WEFT_TRY(check_line(comm, c, r, flag, check));
    if (nlines == 1) {
      k = 1;
      break;
    }
    size_t at = k * WEFT__SHM_LL_LINE_DATA;
    size_t n = chunk_left - at < WEFT__SHM_LL_LINE_DATA ? chunk_left - at : WEFT__SHM_LL_LINE_DATA;
    if (n == WEFT__SHM_LL_LINE_DATA) memcpy(stage + at, line[k].data, WEFT__SHM_LL_LINE_DATA); /* inline: write_chunk */
    else memcpy(stage + at, line[k].data, n);
  }
  if (nlines == 1 && k == 1) weft__req_deliver(comm, r, line->data, chunk_left);
  else if (k > 0) {
    size_t n = k * WEFT__SHM_LL_LINE_DATA;
    weft__req_deliver(comm, r, stage, n < chunk_left ? n : chunk_left);
  }
  *ready = k;
  return WEFT_SUCCESS;
}

weft_status_t weft__shm_ll_recv_progress(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                         int *progressed) {
  weft__shm_conn *sc = c->priv;
  while (!r->complete) {
    uint64_t seq = sc->ll_recv_seq;
    size_t in_chunk = r->done % WEFT__SHM_LL_CHUNK;
    size_t chunk_left = r->bytes - r->done < WEFT__SHM_LL_CHUNK - in_chunk
                            ? r->bytes - r->done : WEFT__SHM_LL_CHUNK - in_chunk;
    size_t nlines = (chunk_left + WEFT__SHM_LL_LINE_DATA - 1) / WEFT__SHM_LL_LINE_DATA;
    if (nlines == 0) nlines = 1; /* an empty message: its one flag */
    const weft__shm_ll_line *line =
        weft__shm_ll_buf(&sc->in, seq) + in_chunk / WEFT__SHM_LL_LINE_DATA;
    size_t ready;
    WEFT_TRY(take_lines(comm, c, r, line, nlines, chunk_left, seq, &ready));
    if (ready == 0)
      return r->done == 0 && weft__shm_cross_check_due(sc) ? check_bulk_instead(comm, c, sc, r)
                                                            : WEFT_SUCCESS;
    *progressed = 1;
    if (r->done == r->bytes) r->complete = 1;
    if (ready < nlines) return WEFT_SUCCESS;
    chunk_consumed(sc);
  }
  return WEFT_SUCCESS;
}

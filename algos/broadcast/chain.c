/* broadcast/chain.c: pipelined chain broadcast root -> root+1 -> ... -> root-1 (mod n),
 * "+1" being the next rank on the communicator's ring (ring.h: a host's ranks contiguous).
 *
 * The buffer is cut into chunks of at most chunk elements. The root sends every chunk from
 * sendbuf and, unless in-place, each send also copies its chunk to recvbuf right after the
 * transport read it (weft__req.copy_to: from cache, so sendbuf is read from memory once;
 * copying before the first send cost 1.5x at 2 ranks); every other rank receives chunk k
 * into recvbuf and, unless it is last in the chain, forwards it as soon as it has arrived,
 * so the chain works on up to WINDOW chunks at once and each link carries one stream.
 * Bytes each rank sends: count * size (root and middle ranks), 0 for the last.
 * Latency term: (n - 2 + nchunks) chunk steps; bandwidth-optimal for large counts.
 * The tuner picks it for large messages (the binomial tree below 1 MiB).
 * Sources: NCCL's ring/chain broadcast; the pipelined linear broadcast of Thakur,
 * Rabenseifner & Gropp 2005 (discussed for long messages there). */
#include <string.h>
#include "algos/ring.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/task.h"

enum { BC_INFLIGHT = 8 }; /* chunks in flight per direction */

typedef struct {
  size_t esize, chunk, nchunks;
  int is_root, has_recv, has_send;
  weft__conn *prev, *next;
  size_t posted_recv, done_recv, posted_send, done_send;
  size_t copied; /* root, out-of-place: chunks of sendbuf copied to recvbuf */
  int fused_copy;  /* root: each send copies its chunk to recvbuf as it goes (req.copy_to) */
  weft__req recv[BC_INFLIGHT], send[BC_INFLIGHT];
} bc_state;

static size_t chunk_len(const weft__task *t, const bc_state *st, size_t k) {
  size_t off = k * st->chunk;
  return t->count - off < st->chunk ? t->count - off : st->chunk;
}

static void bc_advance(bc_state *st) {
  while (st->done_recv < st->posted_recv && st->recv[st->done_recv % BC_INFLIGHT].complete) {
    st->done_recv++;
  }
  while (st->done_send < st->posted_send && st->send[st->done_send % BC_INFLIGHT].complete) {
    st->done_send++;
  }
}

static void bc_post(weft__task *t, bc_state *st) {
  while (st->has_recv && st->posted_recv < st->nchunks &&
         st->posted_recv - st->done_recv < BC_INFLIGHT) {
    size_t k = st->posted_recv++;
    weft__req *r = &st->recv[k % BC_INFLIGHT];
    weft__req_init_recv(r, t->mem, (char *)t->recvbuf + k * st->chunk * st->esize, NULL,
                        chunk_len(t, st, k) * st->esize, t->dtype, WEFT_SUM);
    weft__req_post(st->prev, r);
  }
  /* The root has every chunk; the others forward what has arrived. */
  size_t avail = st->is_root ? st->nchunks : st->done_recv;
  const char *src = st->is_root ? (const char *)t->sendbuf : (const char *)t->recvbuf;
  while (st->has_send && st->posted_send < avail && st->posted_send - st->done_send < BC_INFLIGHT) {
    size_t k = st->posted_send++;
    weft__req *r = &st->send[k % BC_INFLIGHT];
    weft__req_init_send(r, t->mem, src + k * st->chunk * st->esize, chunk_len(t, st, k) * st->esize);
    if (st->fused_copy) r->copy_to = (char *)t->recvbuf + k * st->chunk * st->esize;
    weft__req_post(st->next, r);
  }
}

/* The root's own copy, after its sends are under way: one chunk per call, and never behind
 * the sends. Copying only one per call made the copy trail the sends by hundreds of chunks
 * on large buffers; once the sends were done, each remaining chunk cost a whole back-off of
 * the wait loop (up to a futex sleep), since a memcpy is not transport progress: 256 MiB took
 * 208 ms out-of-place against 18 ms in-place. */
static void bc_copy(weft__task *t, bc_state *st) {
  do {
    if (st->copied == st->nchunks) return;
    size_t k = st->copied++;
    size_t off = k * st->chunk * st->esize;
    /* a large root copy bypasses the cache, as large received messages do (lib/req.c) */
    unsigned nt = weft__mem_nt_flag(t->count * st->esize, 0);
    weft__mem_copy(t->mem, (char *)t->recvbuf + off, (const char *)t->sendbuf + off,
                   chunk_len(t, st, k) * st->esize, nt);
    weft__mem_publish(t->mem, nt);
  } while (st->copied < st->posted_send);
}

static weft_status_t bc_progress(weft__task *t) {
  bc_state *st = t->state;
  bc_advance(st);
  bc_post(t, st);
  bc_copy(t, st);
  if (st->copied < st->nchunks) return WEFT_IN_PROGRESS;
  int recv_done = !st->has_recv || st->done_recv == st->nchunks;
  int send_done = !st->has_send || st->done_send == st->nchunks;
  return recv_done && send_done ? WEFT_SUCCESS : WEFT_IN_PROGRESS;
}

static weft_status_t bc_start(weft__task *t) {
  struct weft_comm *comm = t->comm;
  int n = comm->nranks;
  int pos = weft__ring_pos(weft__comm_ring_pos(comm, comm->rank), weft__comm_ring_pos(comm, t->root), n);
  weft_status_t status;
  bc_state *st = weft__algo_state_alloc(t, sizeof(bc_state), 0, &status);
  if (st == NULL) return status;
  st->esize = weft__dtype_size(t->dtype);
  st->chunk = weft__chunk_elems(comm->chunk_bytes, st->esize);
  st->nchunks = t->count / st->chunk + (t->count % st->chunk ? 1 : 0);
  st->is_root = pos == 0;
  st->has_recv = pos > 0;
  st->has_send = pos < n - 1;
  st->prev = weft__comm_conn(comm, weft__comm_ring_prev(comm, comm->rank));
  st->next = weft__comm_conn(comm, weft__comm_ring_next(comm, comm->rank));
  int local_copy = st->is_root && t->count > 0 && t->sendbuf != t->recvbuf;
  /* With a next rank and disjoint buffers, the root's copy rides on its sends: each chunk is
   * copied right after the transport read it, from cache, so sendbuf is read from memory
   * once (weft__req.copy_to). Otherwise bc_copy does it beside the sends. */
  size_t bytes = t->count * st->esize;
  const char *s = t->sendbuf, *d = t->recvbuf;
  st->fused_copy = local_copy && st->has_send && (s + bytes <= d || d + bytes <= s);
  st->copied = local_copy && !st->fused_copy ? 0 : st->nchunks;
  bc_post(t, st);
  return WEFT_SUCCESS;
}

static double bc_cost(const weft__cost_in *c) { return weft__chain_cost(c, c->b); }

const weft__algo weft__algo_broadcast_chain = {
    .name = "chain", .coll = WEFT__COLL_BROADCAST, .start = bc_start, .progress = bc_progress,
    .cost = bc_cost, .spaces = WEFT__MEM_KINDS_CPU};

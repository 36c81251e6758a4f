/* reduce/chain.c: pipelined chain reduce root+1 -> root+2 -> ... -> root (mod n), "+1"
 * being the next rank on the communicator's ring (ring.h).
 *
 * The buffer is cut into chunks of at most chunk elements. The first rank of the chain
 * (root+1) sends its sendbuf chunks; every next rank receives chunk k and reduces it on
 * arrival with its own sendbuf chunk, into one of WINDOW scratch chunks, then forwards that
 * scratch chunk; the root reduces straight into recvbuf (acc = its sendbuf chunk, which is
 * also right in-place) and, for WEFT_AVG, divides each finished chunk once.
 * recvbuf is only touched on the root (it may be NULL elsewhere).
 * Bytes each rank sends: count * size (all but the root). Latency term: (n - 2 + nchunks)
 * chunk steps. Scratch: WINDOW chunks on middle ranks.
 * The tuner picks it for large messages. Sources: NCCL's ring reduce (a chain ending at the root);
 * the pipelined chain of Thakur, Rabenseifner & Gropp 2005. */
#include <string.h>
#include "algos/ring.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/task.h"

enum { RD_INFLIGHT = 4 }; /* chunks in flight, and scratch chunks of a middle rank */

typedef struct {
  size_t esize, chunk, nchunks;
  int is_first, is_root;
  weft__conn *prev, *next;
  size_t posted_recv, done_recv, posted_send, done_send;
  char *scratch; /* RD_INFLIGHT chunks on middle ranks, inside this allocation */
  weft__req recv[RD_INFLIGHT], send[RD_INFLIGHT];
} rd_state;

static size_t chunk_len(const weft__task *t, const rd_state *st, size_t k) {
  size_t off = k * st->chunk;
  return t->count - off < st->chunk ? t->count - off : st->chunk;
}

static void finalize_chunk(weft__task *t, rd_state *st, size_t k) {
  if (t->op != WEFT_AVG) return;
  weft__mem_avg(t->mem, (char *)t->recvbuf + k * st->chunk * st->esize, chunk_len(t, st, k),
                t->dtype, t->comm->nranks);
}

static void rd_advance(weft__task *t, rd_state *st) {
  while (st->done_recv < st->posted_recv && st->recv[st->done_recv % RD_INFLIGHT].complete) {
    if (st->is_root) finalize_chunk(t, st, st->done_recv);
    st->done_recv++;
  }
  while (st->done_send < st->posted_send && st->send[st->done_send % RD_INFLIGHT].complete) {
    st->done_send++;
  }
}

/* Where chunk k lands: recvbuf on the root, else a scratch chunk free once the send that
 * read it (k - RD_INFLIGHT) is done. */
static int recv_ready(const rd_state *st) {
  if (st->is_first || st->posted_recv >= st->nchunks) return 0;
  if (st->posted_recv - st->done_recv >= RD_INFLIGHT) return 0;
  return st->is_root || st->posted_recv - st->done_send < RD_INFLIGHT;
}

static void rd_post(weft__task *t, rd_state *st) {
  while (recv_ready(st)) {
    size_t k = st->posted_recv++;
    size_t off = k * st->chunk * st->esize;
    void *dst = st->is_root ? (char *)t->recvbuf + off
                            : st->scratch + (k % RD_INFLIGHT) * st->chunk * st->esize;
    weft__req *r = &st->recv[k % RD_INFLIGHT];
    weft__req_init_recv(r, t->mem, dst, (const char *)t->sendbuf + off, chunk_len(t, st, k) * st->esize,
                        t->dtype, t->op);
    weft__req_post(st->prev, r);
  }
  if (st->is_root) return;
  size_t avail = st->is_first ? st->nchunks : st->done_recv;
  while (st->posted_send < avail && st->posted_send - st->done_send < RD_INFLIGHT) {
    size_t k = st->posted_send++;
    const char *src = st->is_first ? (const char *)t->sendbuf + k * st->chunk * st->esize
                                   : st->scratch + (k % RD_INFLIGHT) * st->chunk * st->esize;
    weft__req *r = &st->send[k % RD_INFLIGHT];
    weft__req_init_send(r, t->mem, src, chunk_len(t, st, k) * st->esize);
    weft__req_post(st->next, r);
  }
}

static weft_status_t rd_progress(weft__task *t) {
  rd_state *st = t->state;
  rd_advance(t, st);
  rd_post(t, st);
  int recv_done = st->is_first || st->done_recv == st->nchunks;
  int send_done = st->is_root || st->done_send == st->nchunks;
  return recv_done && send_done ? WEFT_SUCCESS : WEFT_IN_PROGRESS;
}

static weft_status_t rd_start(weft__task *t) {
  struct weft_comm *comm = t->comm;
  int n = comm->nranks;
  int pos = weft__ring_pos(weft__comm_ring_pos(comm, comm->rank),
                           weft__comm_ring_pos(comm, weft__comm_ring_next(comm, t->root)), n);
  size_t esize = weft__dtype_size(t->dtype);
  size_t chunk = weft__chunk_elems(comm->chunk_bytes, esize);
  if (chunk > t->count && t->count > 0) chunk = t->count;
  int middle = n > 2 && pos > 0 && pos < n - 1;
  size_t hdr = weft__align_up(sizeof(rd_state), 64);
  weft_status_t status;
  rd_state *st = weft__algo_state_alloc(t, hdr, middle ? RD_INFLIGHT * chunk * esize : 0, &status);
  if (st == NULL) return status;
  st->esize = esize;
  st->chunk = chunk;
  st->nchunks = t->count / chunk + (t->count % chunk ? 1 : 0);
  st->is_root = comm->rank == t->root;
  st->is_first = !st->is_root && pos == 0;
  st->scratch = (char *)st + hdr;
  st->prev = weft__comm_conn(comm, weft__comm_ring_prev(comm, comm->rank));
  st->next = weft__comm_conn(comm, weft__comm_ring_next(comm, comm->rank));
  if (n == 1 && t->count > 0) {
    if (t->sendbuf != t->recvbuf) weft__mem_copy(t->mem, t->recvbuf, t->sendbuf, t->count * esize, 0);
    st->nchunks = 0;
  }
  rd_post(t, st);
  return WEFT_SUCCESS;
}

static double rd_cost(const weft__cost_in *c) { return weft__chain_cost(c, c->b + c->g); }

const weft__algo weft__algo_reduce_chain = {
    .name = "chain", .coll = WEFT__COLL_REDUCE, .start = rd_start, .progress = rd_progress,
    .cost = rd_cost, .spaces = WEFT__MEM_KINDS_CPU};

/* ring.h: the maths of a ring of ranks, shared by the ring and chain algorithms, and the ring
 * step driver that runs a schedule of ring steps over the transports.
 *
 * Ring order is the communicator's (comm->ring, built from the topology at init, see
 * topo/comm_topo.c: a host's ranks contiguous, then NUMA node and core; rank order without
 * a view). The schedules below are written for ring positions: the rank at position p
 * sends to position p+1 and receives from p-1 (mod n). The ring algorithms map ring block
 * q to the data block of the rank at position q (reduce-scatter, all-gather: rank r still
 * ends with block r) or use it as it is (all-reduce: every rank ends with every block).
 * A buffer is cut into n blocks; each block is cut into pieces of at most `chunk` elements,
 * and slice k is the k-th piece of every block, so one slice moves at most n * chunk
 * elements and the data in flight stays bounded (NCCL's "chunk" and "slice").
 *
 *   reduce-scatter pass, n-1 steps; at step s rank r
 *     sends    block (r - s - 1) mod n   (its own input at s = 0, the partial received at s-1 after)
 *     receives block (r - s - 2) mod n   and reduces it with its own input of that block
 *   after the last step rank r holds block r reduced over all ranks.
 *
 *   all-gather pass, n-1 steps; at step s rank r
 *     sends    block (r - s) mod n       (its own block at s = 0, the block received at s-1 after)
 *     receives block (r - s - 1) mod n
 *
 * In both passes the block sent at step s is the one received at step s-1, so a step's send
 * waits only for the previous step's receive (Patarasuk & Yuan 2009; NCCL's ring).
 * The maths is static inline and pure, so unit tests use it without transports. */
#ifndef WEFT_ALGOS_RING_H
#define WEFT_ALGOS_RING_H
#include <stddef.h>
#include <stdint.h>
#include "weft.h"
#include "lib/algo.h"
#include "lib/comm.h"
#include "lib/req.h"

struct weft__task;

/* v mod n in [0, n) for any sign of v. Callers mostly pass a rank plus or minus a rank,
 * in [-n, 2n): those fold without a division (a 64-bit idiv was 12% of the samples of the
 * binomial broadcast's bc_post, perf). */
static inline int weft__ring_mod(long long v, int n) {
  if (v >= 0 && v < n) return (int)v;
  if (v < 0 && v >= -(long long)n) return (int)(v + n);
  if (v >= n && v < 2 * (long long)n) return (int)(v - n);
  long long m = v % n;
  return (int)(m < 0 ? m + n : m);
}
static inline int weft__ring_next(int rank, int n) { return weft__ring_mod((long long)rank + 1, n); }
static inline int weft__ring_prev(int rank, int n) { return weft__ring_mod((long long)rank - 1, n); }
/* Position of rank on a chain (a ring path) that starts at rank `first`. */
static inline int weft__ring_pos(int rank, int first, int n) {
  return weft__ring_mod((long long)rank - first, n);
}

/* The ring position of rank, and the rank at position pos (any integer, taken mod n). */
static inline int weft__comm_ring_pos(const struct weft_comm *c, int rank) {
  return c->ring_pos != NULL ? c->ring_pos[rank] : rank;
}
static inline int weft__comm_ring_rank(const struct weft_comm *c, long long pos) {
  int p = weft__ring_mod(pos, c->nranks);
  return c->ring != NULL ? c->ring[p] : p;
}
/* The ranks after and before rank on the communicator's ring. */
static inline int weft__comm_ring_next(const struct weft_comm *c, int rank) {
  return weft__comm_ring_rank(c, (long long)weft__comm_ring_pos(c, rank) + 1);
}
static inline int weft__comm_ring_prev(const struct weft_comm *c, int rank) {
  return weft__comm_ring_rank(c, (long long)weft__comm_ring_pos(c, rank) - 1);
}

static inline int weft__ring_rs_send_block(int rank, int n, int step) {
  return weft__ring_mod((long long)rank - step - 1, n);
}
static inline int weft__ring_rs_recv_block(int rank, int n, int step) {
  return weft__ring_mod((long long)rank - step - 2, n);
}
static inline int weft__ring_ag_send_block(int rank, int n, int step) {
  return weft__ring_mod((long long)rank - step, n);
}
static inline int weft__ring_ag_recv_block(int rank, int n, int step) {
  return weft__ring_mod((long long)rank - step - 1, n);
}

/* Pipeline chunk in elements: chunk_bytes rounded down to whole elements, at least one. */
static inline size_t weft__chunk_elems(size_t chunk_bytes, size_t elem_size) {
  size_t c = elem_size ? chunk_bytes / elem_size : 0;
  return c ? c : 1;
}

/* How a buffer is cut into blocks: block b has base + (b < rem) elements and the blocks are
 * contiguous, so an even split of count and n equal blocks are the same structure. */
typedef struct weft__ring_layout {
  size_t base;  /* elements of every block ... */
  size_t rem;   /* ... plus one for the first rem blocks */
  size_t chunk; /* elements per piece, >= 1 */
} weft__ring_layout;

/* count elements split as evenly as possible into nblocks (all-reduce). */
static inline weft__ring_layout weft__ring_layout_split(size_t count, int nblocks, size_t chunk) {
  weft__ring_layout l = {count / (size_t)nblocks, count % (size_t)nblocks, chunk ? chunk : 1};
  return l;
}
/* Blocks of block_count elements each (reduce-scatter, all-gather). */
static inline weft__ring_layout weft__ring_layout_equal(size_t block_count, size_t chunk) {
  weft__ring_layout l = {block_count, 0, chunk ? chunk : 1};
  return l;
}
static inline size_t weft__ring_block_count(const weft__ring_layout *l, int b) {
  return l->base + ((size_t)b < l->rem ? 1 : 0);
}
static inline size_t weft__ring_block_offset(const weft__ring_layout *l, int b) {
  return (size_t)b * l->base + ((size_t)b < l->rem ? (size_t)b : l->rem);
}
/* Slices needed to cover the longest block (0 when every block is empty). */
static inline size_t weft__ring_nslices(const weft__ring_layout *l) {
  size_t longest = l->base + (l->rem ? 1 : 0);
  return longest / l->chunk + (longest % l->chunk ? 1 : 0);
}
/* The piece of block b in slice k: returns its element count (0 when the block is shorter)
 * and sets *off to its first element in the whole buffer. */
static inline size_t weft__ring_piece(const weft__ring_layout *l, int b, size_t k, size_t *off) {
  size_t len = weft__ring_block_count(l, b);
  size_t start = k * l->chunk;
  if (start > len) start = len;
  *off = weft__ring_block_offset(l, b) + start;
  return len - start < l->chunk ? len - start : l->chunk;
}

/* ---- The ring step driver ------------------------------------------------------------
 * Runs nslices slices of nsteps ring steps each. Step s of a slice posts one send to the
 * next rank and one receive from the previous rank on the communicator's ring. Receives are posted in step order as soon
 * as ops->recv_ready allows (NULL: at once, for receives into the user's buffer); the send
 * of step s is posted when the receive of step s-1 has completed. A slice starts when every
 * request of the previous one completed. Zero-byte messages are skipped on both sides: both
 * ranks compute the same piece sizes. */
typedef struct weft__ring_driver weft__ring_driver;
typedef struct weft__ring_ops {
  /* The send of step s of slice k; called once, just before it is posted (or, for a send
   * fed by the receive before it, when that receive is posted: fuse_steps below). */
  void (*send_of)(struct weft__task *t, size_t k, int s, const void **buf, size_t *bytes);
  /* The receive of step s of slice k: dst = acc op incoming (acc NULL: copy). */
  void (*recv_of)(struct weft__task *t, size_t k, int s, void **dst, const void **acc,
                  size_t *bytes);
  /* 1 when the receive of step s may be posted (its scratch is free); NULL: always. */
  int (*recv_ready)(struct weft__task *t, const weft__ring_driver *d, int s);
  /* Called once when every request of slice k completed; NULL: nothing. */
  void (*slice_done)(struct weft__task *t, size_t k);
  /* Where the send of step s of slice k is also copied as it goes (weft__req.copy_to), or
   * NULL; the field NULL: never. */
  void *(*send_copy_to)(struct weft__task *t, size_t k, int s);
} weft__ring_ops;

struct weft__ring_driver {
  const weft__ring_ops *ops;
  int nsteps;
  size_t nslices, slice;
  int posted_send, done_send; /* of the current slice; done_* counts a completed prefix */
  int posted_recv, done_recv;
  weft__conn *next, *prev;
  weft__req *send, *recv; /* [nsteps] each, owned by the algorithm's state */
  /* 1: the last step's receives and every send's copy_to are written past the cache
   * (weft__req.nt); the algorithm sets it after init for a large collective whose
   * output nothing reads again in this call (weft__ring_nt_output). 0 after init. */
  int nt;
  /* The receives of steps s < fuse_steps land where the send of step s+1 reads: each such
   * receive feeds that send as it lands (weft__req.fwd, lib/req.c; NCCL's recvReduceSend
   * and recvCopySend), the send being initialised when the receive is posted. Set by the
   * algorithm after init (not where a send_of writes its buffer: WEFT_AVG's division goes
   * on a receive, avg_step); 0 after init. */
  int fuse_steps;
  /* The one fed receive whose dst is a scratch only its send reads, reduced straight into
   * the send's transport slot instead (weft__req.fwd_skip_dst): the ring all-reduce's last
   * reduce-scatter step on its scratch path. -1 after init: none. */
  int slot_step;
  /* The reducing receive that divides each piece by the communicator's size once reduced
   * (weft__req.avg_div; at most 65535 ranks): a WEFT_AVG all-reduce's last reduce-scatter
   * step, so the block it completes is final as it lands and can be fed on. -1 after
   * init: none. */
  int avg_step;
};

void weft__ring_driver_init(weft__ring_driver *d, struct weft__task *t, const weft__ring_ops *ops,
                            int nsteps, size_t nslices, weft__req *send, weft__req *recv);
/* WEFT_IN_PROGRESS until every slice is done, then WEFT_SUCCESS. */
weft_status_t weft__ring_driver_progress(weft__ring_driver *d, struct weft__task *t);

/* The tuner's cost of a pipelined chain (broadcast/chain.c, reduce/chain.c): per_byte is
 * beta (broadcast) or beta + gamma (reduce). */
double weft__chain_cost(const weft__cost_in *c, double per_byte);

/* 1 when a collective whose output is out_bytes long should write it past the cache
 * (weft__mem_nt_threshold, mem/space.h): it is larger than half the L3. */
int weft__ring_nt_output(size_t out_bytes);
/* The same for a call whose output is out_bytes long on every rank, counting the outputs
 * of all comm's ranks on this host together: they share its last-level cache. Used by the
 * all-to-alls, whose blocks each rank writes once and never reads again in the call, and by
 * the ring all-gather for the blocks it does not forward (its last step's and its own). */
int weft__host_nt_output(const struct weft_comm *comm, size_t out_bytes);

#endif

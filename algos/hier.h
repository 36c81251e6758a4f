/* hier.h: host grouping maths and sub-ring schedules for the hierarchical (two-level)
 * algorithms: ranks grouped by host, then ring steps over explicit lists of ranks.
 *
 * Grouping (identical on every rank: it reads only comm->peers' host identities):
 *   hosts are numbered in the order of their lowest rank; a rank's local index is its
 *   position among its host's ranks in rank order; L_h is host h's rank count.
 *
 * Schedules: a hierarchical algorithm is a list of segments, each a small collective over
 * an explicit list of ranks (members), run one after the other through the rounds driver
 * (algos/rounds.h), one round per ring step; consecutive segments marked with_prev share
 * rounds (several rings at once, e.g. the inter-host rings of the blocks one rank serves):
 *   RS     ring reduce-scatter of a region over k members: k-1 steps, each sends and
 *          receives one of k ring blocks (ring.h's block schedule with positions for
 *          ranks); the member at position p ends with ring block p reduced, received with
 *          reduce-on-arrival (dst = own input op incoming), so no scratch. The region may
 *          be cut into nb >= k blocks, ring block p being blocks p, p + k, ... (one message
 *          each), so hosts with fewer ranks than blocks still cover every block.
 *   AG     ring all-gather of the region's blocks: k-1 steps.
 *   FOLD   members[1..k-1] send their whole input to members[0], which reduces them on
 *          arrival in member order (k-1 rounds at the root, one at the others).
 *   UNFOLD members[0] sends the region to members[1..k-1] (one round).
 * RS and FOLD may divide the final result once for WEFT_AVG (by the communicator's size)
 * before anything is sent on; every later segment only copies it, so every rank ends with
 * the same bits. A segment always takes at least one round (an empty one when it moves
 * nothing), whose finish hook does the k = 1 copy and the WEFT_AVG division. */
#ifndef WEFT_ALGOS_HIER_H
#define WEFT_ALGOS_HIER_H
#include <stddef.h>
#include <stdint.h>
#include "algos/rounds.h"
#include "lib/algo.h"
#include "lib/comm.h"

/* The host shape of a communicator: what the tuner needs (no allocation). nhosts is 0
 * when there are more than WEFT__HIER_MAX_HOSTS hosts (the tuner then skips the
 * hierarchical algorithms). */
typedef struct weft__hier_shape {
  int nhosts;
  int min_local, max_local; /* fewest and most ranks on one host */
} weft__hier_shape;
weft__hier_shape weft__hier_shape_of(const weft__peer_info *peers, int n);

/* How many blocks W the hierarchical all-reduce cuts a message into, one inter-host ring
 * each: for messages of at least WEFT__HIER_WIDE_BYTES the most ranks on one host (at most
 * WEFT__HIER_MAX_WIDTH), else 1 (the hosts' lowest ranks alone: one inter-host ring of few
 * steps, for small messages). On a host of L ranks, min(W, L) of them run the intra-host
 * ring and serve the blocks b = l mod min(W, L); the others fold into them. The tuner's
 * model and the algorithm both call this, so they agree. */
enum { WEFT__HIER_WIDE_BYTES = 16 << 10, WEFT__HIER_MAX_WIDTH = 16 };
static inline int weft__hier_width(int max_local, size_t bytes) {
  if (bytes < WEFT__HIER_WIDE_BYTES || max_local < 2) return 1;
  return max_local < WEFT__HIER_MAX_WIDTH ? max_local : WEFT__HIER_MAX_WIDTH;
}

/* This rank's view of the grouping; the arrays point into caller-provided memory. */
typedef struct weft__hier {
  int nhosts, host, local, nlocal;
  int min_local, max_local;
  int *host_of;     /* [n]: every rank's host */
  int *by_host;     /* [n]: the ranks grouped by host, hosts in order, rank order within */
  int *host_start;  /* [nhosts + 1]: host x's ranks are by_host[host_start[x] ..] */
  int *host_ranks;  /* this host's ranks: by_host + host_start[host] */
} weft__hier;

/* Ints weft__hier_build needs in buf. */
static inline size_t weft__hier_buf_ints(int n) { return 2 * (size_t)n + WEFT__HIER_MAX_HOSTS + 1; }

/* Fills h for rank from peers[0..n) using buf (weft__hier_buf_ints(n) ints). Returns 0,
 * or -1 when there are more than WEFT__HIER_MAX_HOSTS hosts. */
int weft__hier_build(const weft__peer_info *peers, int n, int rank, weft__hier *h, int *buf);

/* Ranks on host x, and the rank with local index l there (-1 when it has fewer ranks). */
static inline int weft__hier_count(const weft__hier *h, int x) {
  return h->host_start[x + 1] - h->host_start[x];
}
static inline int weft__hier_rank(const weft__hier *h, int x, int l) {
  return l >= 0 && l < weft__hier_count(h, x) ? h->by_host[h->host_start[x] + l] : -1;
}

/* ---- the two-level all-gather and reduce-scatter (one block per rank) ----
 * W = max_local inter-host rings; ring b carries, from each host y, the block of the rank
 * with local index b there (none when L_y <= b), and on host x it is served by local
 * b mod L_x. The set of (x, l) is every block its rings carry: ranks (y, b) for b = l,
 * l + L_x, ... below W and below L_y, in (b, y) order; the sets of a host's ranks
 * partition all blocks, so a ring over the host's ranks moving whole sets completes (or,
 * reducing, distributes) the buffer. */
static inline int weft__hier_ring_member(const weft__hier *h, int x, int b) {
  return weft__hier_rank(h, x, b % weft__hier_count(h, x));
}
/* Writes the set of (host x, local l) into out (ranks, at most n); returns its size. */
int weft__hier_set(const weft__hier *h, int W, int x, int l, int *out);

/* The tuner's cost of the two-level all-gather (reduce 0) and reduce-scatter (reduce 1),
 * B bytes per rank: H-1 network steps on W = Lmax rings that share the host's link, which
 * carries the larger of the n - Lmin blocks the least crowded host receives and the
 * (H-1) W slots it forwards; then Lmax - 1 steps within the host moving the other ranks'
 * blocks of the host. reduce adds the reductions of both levels. */
double weft__hier_gather_cost(const weft__cost_in *c, int reduce);

/* ---- schedules ---- */
enum { WEFT__HSEG_RS, WEFT__HSEG_AG, WEFT__HSEG_FOLD, WEFT__HSEG_UNFOLD };
enum { WEFT__HSCHED_MAX_SEGS = 4 + 2 * WEFT__HIER_MAX_WIDTH };

typedef struct weft__hseg {
  int kind;          /* WEFT__HSEG_* */
  const int *members;
  int k, pos;        /* member count and this rank's position */
  size_t off, count; /* the region of the buffers, in elements */
  int nb;            /* RS / AG: blocks the region is cut into (>= k, as the ring splits a
                        buffer); member p owns blocks p, p + k, ... (the ring's block p) */
  int from_send;     /* RS / FOLD: this rank's input is t->sendbuf (else t->recvbuf) */
  int avg;           /* RS / FOLD: divide the result by comm->nranks (WEFT_AVG) */
  int with_prev;     /* runs in the same rounds as the segment before (same round count):
                        several rings at once; each round posts them in segment order */
} weft__hseg;

/* The algorithm's state must begin with this (hier.c reads it through t->state). */
typedef struct weft__hsched {
  weft__rounds rounds;
  int nseg, ngroup;
  weft__hseg seg[WEFT__HSCHED_MAX_SEGS];
  int group_seg[WEFT__HSCHED_MAX_SEGS + 1]; /* first segment of each group of segments */
  int first[WEFT__HSCHED_MAX_SEGS + 1];     /* first round of each group */
  size_t esize;
} weft__hsched;

/* Appends a segment (at most WEFT__HSCHED_MAX_SEGS; the caller stays below). */
void weft__hsched_add(weft__hsched *s, const weft__hseg *seg);
/* Rounds of seg for this rank (at least 1). */
int weft__hseg_rounds(const weft__hseg *seg);
/* Requests one round may post: what req must hold. */
int weft__hsched_maxreq(const weft__hsched *s);
/* Sets up the rounds driver over the added segments (req: weft__hsched_maxreq entries). */
void weft__hsched_start(weft__hsched *s, weft__task *t, weft__req *req);
/* WEFT_IN_PROGRESS until every segment is done. */
weft_status_t weft__hsched_progress(weft__task *t);
#endif

/* all_reduce/hierarchical.c: two-level all-reduce for ranks spread over several hosts:
 * intra-host steps over shared memory, inter-host steps over sockets, and each byte
 * crosses the network about once per host rather than once per rank.
 *
 * Ranks are grouped by host (algos/hier.h: hosts in order of their lowest rank, local index
 * = position on the host). W = weft__hier_width(): the most ranks on one host (capped at 16)
 * for messages of 16 KiB and more, else 1. The message is cut into W blocks, each with its
 * own inter-host ring. On a host of L ranks, Wl = min(W, L) ranks take part: local l < Wl
 * serves blocks l, l + Wl, ...; locals l >= Wl fold into l mod Wl. Segments, in order
 * (hier.h runs them as rounds):
 *   1 FOLD     local l mod Wl receives the whole input of l + Wl, l + 2 Wl, ... and reduces
 *              it on arrival in rank order (only for small messages or more than 16 ranks
 *              on a host).
 *   2 RS       ring reduce-scatter among the host's Wl serving ranks: each ends with its
 *              blocks reduced over the host. Wl - 1 steps.
 *   3 RS + AG  per block, a ring all-reduce among the ranks serving it, one per host (H
 *              hosts): 2 (H - 1) steps of count/(W H) elements; a rank serving several
 *              blocks runs their rings in the same rounds. The owner of each sub-block
 *              divides it for WEFT_AVG, once, before it is sent on.
 *   4 AG       ring all-gather of the blocks within the host.
 *   5 UNFOLD   local l mod Wl sends the result to the ranks that folded into it.
 * With W = 1 this is reduce -> leaders' ring all-reduce -> broadcast; with L ranks on every
 * host it is reduce-scatter -> all-reduce among equal local indices -> all-gather; with
 * unequal hosts a host of fewer ranks serves several blocks per rank, so no host folds and
 * every host's link carries the same bytes. Every element is reduced in one fixed order on
 * one rank and then copied, so all ranks hold identical bits. The schedule reads only
 * comm->peers and the message size, identical on every rank, so all ranks agree on it.
 * Bytes each host sends over the network: 2 (H-1)/H B, against up to 2 (n-1)/n B on each
 * inter-host link of the flat ring; over shm, 2 (L-1)/L B per rank. Latency: 2 (Wl - 1)
 * shm steps + 2 (H - 1) network steps (+ the folds).
 * Picked by the tuner (lib/select.c) for several hosts with more than one rank on some.
 * Sources: Open MPI's coll/han (node leaders), NCCL's tree/ring split between intra- and
 * inter-node, Thakur, Rabenseifner & Gropp 2005 (ring reduce-scatter / all-gather). */
#include <math.h>
#include <string.h>
#include "algos/algos.h"
#include "algos/hier.h"
#include "algos/ring.h"
#include "lib/dtype.h"
#include "lib/status.h"

typedef struct {
  weft__hsched sched; /* first: hier.c reads it through t->state */
  weft__hier hier;
  int *fold;          /* this rank's fold group: root first */
  int nfold, fold_pos;
  int *rings;         /* members of the inter-host ring of each block this rank serves */
  weft__req *req;
} har_state;

/* The fold group of local index l on a host running Wh ranks: l mod Wh, then + Wh ... */
static void build_fold(har_state *st, int Wh) {
  const weft__hier *h = &st->hier;
  st->nfold = 0;
  for (int l = h->local % Wh; l < h->nlocal; l += Wh) {
    if (l == h->local) st->fold_pos = st->nfold;
    st->fold[st->nfold++] = h->host_ranks[l];
  }
}

/* Block b's inter-host ring: on each host x the rank serving b, local b mod min(W, L_x). */
static void ring_of_block(const weft__hier *h, int W, int b, int *members) {
  for (int x = 0; x < h->nhosts; x++) {
    int Wx = weft__hier_count(h, x) < W ? weft__hier_count(h, x) : W;
    members[x] = weft__hier_rank(h, x, b % Wx);
  }
}

static void build_schedule(har_state *st, weft__task *t, int W) {
  const weft__hier *h = &st->hier;
  weft__hsched *s = &st->sched;
  int Wh = W < h->nlocal ? W : h->nlocal, H = h->nhosts;
  weft__hseg fold = {WEFT__HSEG_FOLD, st->fold, st->nfold, st->fold_pos, 0, t->count, 1, 1, 0, 0};
  if (st->nfold > 1) weft__hsched_add(s, &fold);
  if (h->local < Wh) {
    weft__hseg ring = {WEFT__HSEG_RS, h->host_ranks, Wh, h->local, 0, t->count, W, st->nfold == 1, 0, 0};
    weft__hsched_add(s, &ring);
    weft__ring_layout l = weft__ring_layout_split(t->count, W, 1);
    for (int kind = WEFT__HSEG_RS; kind <= WEFT__HSEG_AG; kind++) {
      int served = 0;
      for (int b = h->local; b < W; b += Wh, served++) {
        int *members = st->rings + (size_t)served * H;
        ring_of_block(h, W, b, members);
        weft__hseg inter = {kind, members, H, h->host, weft__ring_block_offset(&l, b),
                            weft__ring_block_count(&l, b), H, 0, kind == WEFT__HSEG_RS, served > 0};
        weft__hsched_add(s, &inter);
      }
    }
    ring.kind = WEFT__HSEG_AG;
    weft__hsched_add(s, &ring);
  }
  if (st->nfold > 1) {
    fold.kind = WEFT__HSEG_UNFOLD, fold.from_send = 0;
    weft__hsched_add(s, &fold);
  }
}

static weft_status_t har_start(weft__task *t) {
  int n = t->comm->nranks;
  weft__hier_shape sh = weft__hier_shape_of(t->comm->peers, n);
  if (sh.nhosts == 0)
    return weft__error(t->comm, WEFT_ERR_INTERNAL, "rank %d: all_reduce hierarchical: more than %d hosts",
                       t->comm->rank, WEFT__HIER_MAX_HOSTS);
  int W = weft__hier_width(sh.max_local, t->count * weft__dtype_size(t->dtype));
  size_t hdr = weft__align_up(sizeof(har_state), 64);
  size_t nints = weft__hier_buf_ints(n) + (size_t)n + (size_t)W * (size_t)sh.nhosts;
  size_t ints = weft__align_up(nints * sizeof(int), 64);
  size_t nreq = 2 * (size_t)W + (size_t)n + 2;
  weft_status_t status;
  har_state *st = weft__algo_state_alloc(t, hdr, ints + nreq * sizeof(weft__req), &status);
  if (st == NULL) return status;
  int *buf = (int *)((char *)st + hdr);
  weft__hier_build(t->comm->peers, n, t->comm->rank, &st->hier, buf);
  st->fold = buf + weft__hier_buf_ints(n);
  st->rings = st->fold + n;
  st->req = (weft__req *)((char *)st + hdr + ints);
  build_fold(st, W < st->hier.nlocal ? W : st->hier.nlocal);
  build_schedule(st, t, W);
  weft__hsched_start(&st->sched, t, st->req);
  weft__hsched_progress(t); /* gets the first messages moving */
  return WEFT_SUCCESS;
}

static weft_status_t har_progress(weft__task *t) { return weft__hsched_progress(t); }

static double har_cost(const weft__cost_in *c) {
  /* Only for several hosts with more than one rank on some (else it is the flat ring or
   * a fold into one rank). W blocks, each with an inter-host ring; on the most crowded host
   * min(W, Lmax) ranks run the intra-host ring and F - 1 fold into each; on the least
   * crowded one a rank reduces ceil(W / Lmin) blocks. The inter-host rings of a host share
   * its link, so the network term charges a host's bytes, 2 (H-1)/H B, not one ring's:
   * conservative. */
  if (c->H < 2 || c->Lmax < 2) return INFINITY;
  double W = weft__hier_width(c->Lmax, (size_t)c->bytes), H = c->H, B = c->bytes;
  double Wl = W < c->Lmax ? W : c->Lmax, F = ceil(c->Lmax / Wl);
  double served = ceil(W / (c->Lmin < W ? c->Lmin : W));
  double fold = (F - 1) * (c->a_in + B * (c->b_in + c->g_in));
  double unfold = F > 1 ? c->a_in + (F - 1) * B * c->b_in : 0;
  double intra = 2 * (Wl - 1) * c->a_in + 2 * (Wl - 1) / Wl * B * c->b_in + (Wl - 1) / Wl * B * c->g_in;
  double inter = 2 * (H - 1) * c->a_out + 2 * (H - 1) / H * B * c->b_out +
                 (H - 1) / H * B * served / W * c->g_out;
  return fold + intra + inter + unfold;
}

const weft__algo weft__algo_all_reduce_hierarchical = {
    .name = "hierarchical", .coll = WEFT__COLL_ALL_REDUCE, .start = har_start,
    .progress = har_progress, .cost = har_cost, .spaces = WEFT__MEM_KINDS_CPU};

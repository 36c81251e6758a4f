/* reduce_scatter/hierarchical.c: two-level reduce-scatter for ranks spread over several
 * hosts, the mirror of all_gather/hierarchical.c: blocks are first reduced within each host
 * over shared memory, then each crosses the network once per host on its way to its owner.
 * Rank r ends with block r (recvcount elements) of sendbuf reduced over all ranks.
 *
 * Grouping and rings as in hier.h: H hosts, L_x ranks on host x, W = the most ranks on one
 * host; ring b has one member per host (local b mod L_x), slot y of ring b is the block of
 * rank (y, local b). Steps (rounds, algos/rounds.h):
 *   1 intra    a ring reduce-scatter over the host's ranks of whole sets (hier.h: the blocks
 *              of the slots a rank's rings carry, its own block among them), L_x - 1 steps,
 *              one message per block, reduced on arrival with the rank's input into a
 *              scratch copy of the buffer: afterwards each rank holds its set reduced over
 *              the host.
 *   2 inter    W inter-host rings in the same rounds, H-1 steps each: a ring
 *              reduce-scatter of the slots (ring.h's schedule with host indices for
 *              positions); the last step reduces the rank's own slot straight into recvbuf.
 *              WEFT_AVG divides it once at the end.
 * Hosts of one rank skip step 1 (their input is the host's partial); a host with fewer
 * ranks than W serves several rings per rank, so no host folds.
 * Bytes each rank sends: over shm (L_x - 1)/L_x * n blocks; over the network about
 * (n - L_x) blocks per host (the flat ring's inter-host link carries n-1). Latency:
 * (L_x - 1) shm steps + (H-1) network steps against n-1 steps of the slowest link.
 * Scratch: the size of sendbuf. Every block is reduced by one fixed schedule; the order
 * differs from the flat ring's, so float results may differ from it in the last bits.
 * Picked by the tuner (lib/select.c) for several hosts with more than one rank on some.
 * Sources: Open MPI's coll/han, NCCL's inter/intra-node split, Thakur, Rabenseifner & Gropp
 * 2005 (ring reduce-scatter). */
#include <string.h>
#include "algos/hier.h"
#include "algos/ring.h"
#include "lib/dtype.h"
#include "lib/status.h"

typedef struct {
  weft__rounds rounds;
  weft__hier hier;
  int W, intra_rounds;
  size_t block;   /* bytes of one rank's block */
  char *scratch;  /* partials, laid out as sendbuf */
  int *set;       /* one set (n ints) */
  weft__req *req;
} hrs_state;

static size_t off_of(const hrs_state *st, int rank) { return (size_t)rank * st->block; }

/* Where this rank's host-reduced block of rank q lives once step 1 is over. */
static const char *host_partial(weft__task *t, const hrs_state *st, int q) {
  return (st->hier.nlocal > 1 ? st->scratch : (const char *)t->sendbuf) + off_of(st, q);
}

/* Step s of the ring over the host's ranks (ring.h's reduce-scatter schedule on sets). */
static void post_intra(weft__task *t, hrs_state *st, int s) {
  const weft__hier *h = &st->hier;
  int L = h->nlocal, l = h->local, me = t->comm->rank, one_host = h->nhosts == 1;
  int next = h->host_ranks[(l + 1) % L], prev = h->host_ranks[(l + L - 1) % L];
  const char *src = s == 0 ? (const char *)t->sendbuf : st->scratch;
  int k = weft__hier_set(h, st->W, h->host, weft__ring_rs_send_block(l, L, s), st->set);
  for (int i = 0; i < k; i++) weft__round_send(&st->rounds, t, next, src + off_of(st, st->set[i]), st->block);
  k = weft__hier_set(h, st->W, h->host, weft__ring_rs_recv_block(l, L, s), st->set);
  for (int i = 0; i < k; i++) {
    int q = st->set[i];
    /* On one host (forced) the last step's own block is final: straight to recvbuf. */
    char *dst = one_host && q == me ? (char *)t->recvbuf : st->scratch + off_of(st, q);
    weft__round_recv(&st->rounds, t, prev, dst, (const char *)t->sendbuf + off_of(st, q), st->block);
  }
}

/* Step s of every inter-host ring this rank serves. */
static void post_inter(weft__task *t, hrs_state *st, int s) {
  const weft__hier *h = &st->hier;
  int H = h->nhosts, x = h->host, me = t->comm->rank;
  int sy = weft__ring_rs_send_block(x, H, s), ry = weft__ring_rs_recv_block(x, H, s);
  for (int b = h->local; b < st->W; b += h->nlocal) {
    int next = weft__hier_ring_member(h, (x + 1) % H, b), prev = weft__hier_ring_member(h, (x + H - 1) % H, b);
    int sr = weft__hier_rank(h, sy, b), rr = weft__hier_rank(h, ry, b);
    /* Step 0 sends the host's partial; later steps forward what the step before received. */
    if (sr >= 0) {
      const char *src = s == 0 ? host_partial(t, st, sr) : st->scratch + off_of(st, sr);
      weft__round_send(&st->rounds, t, next, src, st->block);
    }
    if (rr < 0) continue;
    char *dst = rr == me ? (char *)t->recvbuf : st->scratch + off_of(st, rr);
    weft__round_recv(&st->rounds, t, prev, dst, host_partial(t, st, rr), st->block);
  }
}

static void hrs_post(weft__task *t, int i) {
  hrs_state *st = t->state;
  if (i < st->intra_rounds) post_intra(t, st, i);
  else post_inter(t, st, i - st->intra_rounds);
}

static void hrs_finish(weft__task *t, int i) {
  hrs_state *st = t->state;
  if (i == st->rounds.nrounds - 1 && t->op == WEFT_AVG)
    weft__mem_avg(t->mem, t->recvbuf, t->count, t->dtype, t->comm->nranks);
}

static weft_status_t hrs_start(weft__task *t) {
  int n = t->comm->nranks;
  weft__hier_shape sh = weft__hier_shape_of(t->comm->peers, n);
  if (sh.nhosts == 0)
    return weft__error(t->comm, WEFT_ERR_INTERNAL, "rank %d: reduce_scatter hierarchical: more than %d hosts",
                       t->comm->rank, WEFT__HIER_MAX_HOSTS);
  size_t block = t->count * weft__dtype_size(t->dtype);
  size_t hdr = weft__align_up(sizeof(hrs_state), 64);
  size_t ints = weft__align_up((weft__hier_buf_ints(n) + (size_t)n) * sizeof(int), 64);
  size_t nreq = 2 * (size_t)n + 2 * (size_t)sh.max_local + 2;
  size_t reqs = weft__align_up(nreq * sizeof(weft__req), 64);
  weft_status_t status;
  hrs_state *st = weft__algo_state_alloc(t, hdr, ints + reqs + (size_t)n * block, &status);
  if (st == NULL) return status;
  int *buf = (int *)((char *)st + hdr);
  weft__hier_build(t->comm->peers, n, t->comm->rank, &st->hier, buf);
  st->set = buf + weft__hier_buf_ints(n);
  st->req = (weft__req *)((char *)st + hdr + ints);
  st->scratch = (char *)st + hdr + ints + reqs;
  st->W = sh.max_local;
  st->block = block;
  st->intra_rounds = st->hier.nlocal - 1;
  int nrounds = st->intra_rounds + st->hier.nhosts - 1;
  if (nrounds == 0 && t->sendbuf != t->recvbuf) /* one rank */
    weft__mem_copy(t->mem, t->recvbuf, t->sendbuf, block, 0);
  weft__rounds_init(&st->rounds, nrounds, st->req, (int)nreq, hrs_post, hrs_finish);
  weft__rounds_progress(&st->rounds, t);
  return WEFT_SUCCESS;
}

static weft_status_t hrs_progress(weft__task *t) {
  hrs_state *st = t->state;
  return weft__rounds_progress(&st->rounds, t);
}

static double hrs_cost(const weft__cost_in *c) { return weft__hier_gather_cost(c, 1); }

const weft__algo weft__algo_reduce_scatter_hierarchical = {
    .name = "hierarchical", .coll = WEFT__COLL_REDUCE_SCATTER, .start = hrs_start,
    .progress = hrs_progress, .cost = hrs_cost, .spaces = WEFT__MEM_KINDS_CPU};

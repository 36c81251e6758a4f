/* all_gather/hierarchical.c: two-level all-gather for ranks spread over several hosts: each
 * block crosses the network once into every other host, then spreads within the host over
 * shared memory, so the network sees H-1 dependent steps instead of the flat ring's n-1.
 *
 * Ranks are grouped by host (algos/hier.h: hosts in order of their lowest rank, local
 * index = position among the host's ranks); H hosts, L_x ranks on host x, W = the most
 * ranks on one host. Steps (rounds, algos/rounds.h):
 *   0 copy     each rank puts its input into its block of recvbuf (nothing in place).
 *   1 inter    W inter-host rings run in the same rounds, H-1 steps: ring b has one member
 *              per host (local b mod L_x) and H slots, slot y being the block of rank
 *              (y, local b) (empty when host y has no local b); a ring all-gather of the
 *              slots (ring.h's schedule with host indices for positions). A host with fewer
 *              ranks than W serves several rings per rank, so every rank's block leaves its
 *              host once and unequal hosts need no fold.
 *   2 intra    a ring all-gather over the host's ranks of whole sets (hier.h: the blocks
 *              each rank's rings brought), L_x - 1 steps, one message per block.
 * Bytes each rank sends: over the network (H-1) blocks per ring it serves (a host sends
 * about (n - L_x) blocks in all, the flat ring's inter-host link carries n-1); over shm,
 * (L_x - 1)/L_x * n blocks. Latency: (H-1) network steps + (L_x - 1) shm steps, against
 * n-1 steps of the slowest link for the flat ring.
 * Picked by the tuner (lib/select.c) for several hosts with more than one rank on some.
 * Sources: Open MPI's coll/han all-gather (node leaders), NCCL's inter/intra-node split,
 * Thakur, Rabenseifner & Gropp 2005 (ring all-gather). */
#include <string.h>
#include "algos/hier.h"
#include "algos/ring.h"
#include "lib/dtype.h"
#include "lib/status.h"

typedef struct {
  weft__rounds rounds;
  weft__hier hier;
  int W, inter_rounds;
  size_t block;   /* bytes of one rank's block */
  int *set;       /* scratch for one set (n ints) */
  weft__req *req;
} hag_state;

static char *block_at(weft__task *t, const hag_state *st, int rank) {
  return (char *)t->recvbuf + (size_t)rank * st->block;
}

/* Step s of every inter-host ring this rank serves: slots as in ring.h's all-gather. */
static void post_inter(weft__task *t, hag_state *st, int s) {
  const weft__hier *h = &st->hier;
  int H = h->nhosts, x = h->host;
  int sy = weft__ring_ag_send_block(x, H, s), ry = weft__ring_ag_recv_block(x, H, s);
  for (int b = h->local; b < st->W; b += h->nlocal) {
    int next = weft__hier_ring_member(h, (x + 1) % H, b), prev = weft__hier_ring_member(h, (x + H - 1) % H, b);
    int sr = weft__hier_rank(h, sy, b), rr = weft__hier_rank(h, ry, b);
    if (sr >= 0) weft__round_send(&st->rounds, t, next, block_at(t, st, sr), st->block);
    if (rr >= 0) weft__round_recv(&st->rounds, t, prev, block_at(t, st, rr), NULL, st->block);
  }
}

/* Step s of the ring over the host's ranks: whole sets, one message per block. */
static void post_intra(weft__task *t, hag_state *st, int s) {
  const weft__hier *h = &st->hier;
  int L = h->nlocal, l = h->local;
  int next = h->host_ranks[(l + 1) % L], prev = h->host_ranks[(l + L - 1) % L];
  int k = weft__hier_set(h, st->W, h->host, weft__ring_ag_send_block(l, L, s), st->set);
  for (int i = 0; i < k; i++) weft__round_send(&st->rounds, t, next, block_at(t, st, st->set[i]), st->block);
  k = weft__hier_set(h, st->W, h->host, weft__ring_ag_recv_block(l, L, s), st->set);
  for (int i = 0; i < k; i++)
    weft__round_recv(&st->rounds, t, prev, block_at(t, st, st->set[i]), NULL, st->block);
}

static void hag_post(weft__task *t, int i) {
  hag_state *st = t->state;
  if (i < st->inter_rounds) post_inter(t, st, i);
  else post_intra(t, st, i - st->inter_rounds);
}

static weft_status_t hag_start(weft__task *t) {
  int n = t->comm->nranks;
  weft__hier_shape sh = weft__hier_shape_of(t->comm->peers, n);
  if (sh.nhosts == 0)
    return weft__error(t->comm, WEFT_ERR_INTERNAL, "rank %d: all_gather hierarchical: more than %d hosts",
                       t->comm->rank, WEFT__HIER_MAX_HOSTS);
  size_t hdr = weft__align_up(sizeof(hag_state), 64);
  size_t ints = weft__align_up((weft__hier_buf_ints(n) + (size_t)n) * sizeof(int), 64);
  size_t nreq = 2 * (size_t)n + 2 * (size_t)sh.max_local + 2;
  weft_status_t status;
  hag_state *st = weft__algo_state_alloc(t, hdr, ints + nreq * sizeof(weft__req), &status);
  if (st == NULL) return status;
  int *buf = (int *)((char *)st + hdr);
  weft__hier_build(t->comm->peers, n, t->comm->rank, &st->hier, buf);
  st->set = buf + weft__hier_buf_ints(n);
  st->req = (weft__req *)((char *)st + hdr + ints);
  st->W = sh.max_local;
  st->block = t->count * weft__dtype_size(t->dtype);
  st->inter_rounds = st->hier.nhosts - 1;
  char *own = block_at(t, st, t->comm->rank);
  if ((const void *)own != t->sendbuf) weft__mem_copy(t->mem, own, t->sendbuf, st->block, WEFT__MEM_OVERLAP);
  weft__rounds_init(&st->rounds, st->inter_rounds + st->hier.nlocal - 1, st->req, (int)nreq, hag_post, NULL);
  weft__rounds_progress(&st->rounds, t); /* gets the first messages moving */
  return WEFT_SUCCESS;
}

static weft_status_t hag_progress(weft__task *t) {
  hag_state *st = t->state;
  return weft__rounds_progress(&st->rounds, t);
}

static double hag_cost(const weft__cost_in *c) { return weft__hier_gather_cost(c, 0); }

const weft__algo weft__algo_all_gather_hierarchical = {
    .name = "hierarchical", .coll = WEFT__COLL_ALL_GATHER, .start = hag_start,
    .progress = hag_progress, .cost = hag_cost, .spaces = WEFT__MEM_KINDS_CPU};

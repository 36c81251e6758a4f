/* broadcast/hierarchical.c: two-level broadcast for ranks spread over several hosts: a
 * binomial tree over one leader per host (the root on its host, local index 0 elsewhere),
 * then a binomial tree within each host from its leader, so the message crosses the network
 * ceil(log2 H) dependent times, once into each host, instead of the ceil(log2 n) network
 * hops a flat binomial tree may take.
 *
 * Ranks are grouped by host (algos/hier.h). Rounds (algos/rounds.h):
 *   0  a leader other than the root receives the message from its parent leader (host
 *      tree: virtual host (x - root's host) mod H, patterns.h's binomial maths);
 *   1  a leader sends it to its child leaders, farthest first;
 *   2  a rank other than its host's leader receives from its parent in the host's tree
 *      (virtual local index relative to the leader's);
 *   3  it sends to its children within the host.
 * Bytes each rank sends: the whole message once per child (a leader: up to ceil(log2 H)
 * over the network plus ceil(log2 L) over shm). Latency: ceil(log2 H) network steps +
 * ceil(log2 L) shm steps. Not pipelined: the tuner keeps the chain (whose ring order puts a
 * host's ranks together, so it also crosses each host boundary once) for large messages.
 * Picked by the tuner (lib/select.c) for several hosts with more than one rank on some.
 * Sources: Open MPI's coll/han broadcast (inter-node then intra-node), MPICH's
 * SMP-aware broadcast; binomial trees as in Thakur, Rabenseifner & Gropp 2005. */
#include <math.h>
#include <string.h>
#include "algos/hier.h"
#include "algos/patterns.h"
#include "lib/dtype.h"
#include "lib/status.h"

typedef struct {
  weft__rounds rounds;
  weft__hier hier;
  int root_host, leader_local; /* the root's host; the local index of this host's leader */
  size_t bytes;
  weft__req *req;
} hbc_state;

/* The leader of host x: the root on its own host, else the host's local 0. */
static int leader_of(const hbc_state *st, int x, int root) {
  return x == st->root_host ? root : weft__hier_rank(&st->hier, x, 0);
}

/* Rounds 0 and 1: the tree over the hosts' leaders. */
static void post_leaders(weft__task *t, hbc_state *st, int i) {
  const weft__hier *h = &st->hier;
  int H = h->nhosts, v = weft__binomial_vrank(h->host, st->root_host, H);
  if (t->comm->rank != leader_of(st, h->host, t->root)) return;
  if (i == 0) {
    int parent = weft__binomial_parent(v);
    if (parent >= 0)
      weft__round_recv(&st->rounds, t, leader_of(st, weft__binomial_real(parent, st->root_host, H), t->root),
                       t->recvbuf, NULL, st->bytes);
    return;
  }
  for (int m = weft__binomial_farthest(v, H); m >= 1; m /= 2) {
    int child = weft__binomial_real(v + m, st->root_host, H);
    weft__round_send(&st->rounds, t, leader_of(st, child, t->root), t->recvbuf, st->bytes);
  }
}

/* Rounds 2 and 3: the tree within this host, rooted at its leader. */
static void post_host(weft__task *t, hbc_state *st, int i) {
  const weft__hier *h = &st->hier;
  int L = h->nlocal, v = weft__binomial_vrank(h->local, st->leader_local, L);
  if (i == 2) {
    int parent = weft__binomial_parent(v);
    if (parent >= 0)
      weft__round_recv(&st->rounds, t, h->host_ranks[weft__binomial_real(parent, st->leader_local, L)],
                       t->recvbuf, NULL, st->bytes);
    return;
  }
  for (int m = weft__binomial_farthest(v, L); m >= 1; m /= 2) {
    int child = weft__binomial_real(v + m, st->leader_local, L);
    weft__round_send(&st->rounds, t, h->host_ranks[child], t->recvbuf, st->bytes);
  }
}

static void hbc_post(weft__task *t, int i) {
  hbc_state *st = t->state;
  if (i < 2) post_leaders(t, st, i);
  else post_host(t, st, i);
}

static weft_status_t hbc_start(weft__task *t) {
  int n = t->comm->nranks;
  weft__hier_shape sh = weft__hier_shape_of(t->comm->peers, n);
  if (sh.nhosts == 0)
    return weft__error(t->comm, WEFT_ERR_INTERNAL, "rank %d: broadcast hierarchical: more than %d hosts",
                       t->comm->rank, WEFT__HIER_MAX_HOSTS);
  int nreq = weft__ceil_log2(n) + 2;
  size_t hdr = weft__align_up(sizeof(hbc_state), 64);
  size_t ints = weft__align_up(weft__hier_buf_ints(n) * sizeof(int), 64);
  weft_status_t status;
  hbc_state *st = weft__algo_state_alloc(t, hdr, ints + (size_t)nreq * sizeof(weft__req), &status);
  if (st == NULL) return status;
  weft__hier_build(t->comm->peers, n, t->comm->rank, &st->hier, (int *)((char *)st + hdr));
  st->req = (weft__req *)((char *)st + hdr + ints);
  st->root_host = st->hier.host_of[t->root];
  st->bytes = t->count * weft__dtype_size(t->dtype);
  int leader = leader_of(st, st->hier.host, t->root);
  for (int l = 0; l < st->hier.nlocal; l++)
    if (st->hier.host_ranks[l] == leader) st->leader_local = l;
  if (t->comm->rank == t->root && t->sendbuf != t->recvbuf)
    weft__mem_copy(t->mem, t->recvbuf, t->sendbuf, st->bytes, 0);
  weft__rounds_init(&st->rounds, st->bytes > 0 ? 4 : 0, st->req, nreq, hbc_post, NULL);
  weft__rounds_progress(&st->rounds, t);
  return WEFT_SUCCESS;
}

static weft_status_t hbc_progress(weft__task *t) {
  hbc_state *st = t->state;
  return weft__rounds_progress(&st->rounds, t);
}

/* Binomial trees over the hosts' leaders, then within the most crowded host. */
static double hbc_cost(const weft__cost_in *c) {
  if (c->H < 2 || c->Lmax < 2) return INFINITY;
  return weft__ceil_log2(c->H) * (c->a_out + c->bytes * c->b_out) +
         weft__ceil_log2(c->Lmax) * (c->a_in + c->bytes * c->b_in);
}

const weft__algo weft__algo_broadcast_hierarchical = {
    .name = "hierarchical", .coll = WEFT__COLL_BROADCAST, .start = hbc_start,
    .progress = hbc_progress, .cost = hbc_cost, .spaces = WEFT__MEM_KINDS_CPU};

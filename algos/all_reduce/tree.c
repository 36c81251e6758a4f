/* all_reduce/tree.c: double binary tree all-reduce, as in NCCL: two complementary binary
 * trees (patterns.h, weft__dtree_node), each carrying half of the buffer.
 *
 * Per tree t, on the half h_t (the first ceil(count/2) elements for tree 0, the rest for
 * tree 1):
 *   up     a rank receives each child's partial into its own scratch, combines
 *          child0 op mine op child1 (in tree 0 that is rank order), and sends the result to
 *          its parent; a leaf sends its input. The root ends with h_t fully reduced, divides
 *          it once for WEFT_AVG, and so every rank receives the root's bits.
 *   down   a rank receives h_t from its parent into recvbuf and forwards it to its children.
 * The trees run at the same time. Messages are matched per peer in FIFO order with no tags,
 * and a pair of ranks can be linked in both trees, so both sides keep one canonical order:
 * receives are all posted at start as [tree 0 up from children, tree 1 up from children,
 * tree 0 down from parent, tree 1 down from parent], and sends are posted strictly in the
 * order [tree 0 up, tree 1 up, tree 0 down, tree 1 down]. No phase waits on a later one,
 * so the order cannot deadlock.
 * Bytes each rank sends: about count * size (half up and half down per tree, inner nodes
 * twice down). Latency term: 2 tree depths, about 2 log2 n steps. Not pipelined by chunks
 * yet (NCCL pipelines each tree), so the tuner weighs it like the other whole-message
 * algorithms. Scratch: 3 halves per tree (two children, one partial).
 * Sources: Sanders, Speck & Traeff, "Two-tree algorithms for full bandwidth broadcast,
 * reduction and scan" (Parallel Computing 2009); NCCL 2.4's double binary trees. */
#include <string.h>
#include "algos/patterns.h"
#include "lib/algo.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/task.h"

enum { MAX_RECV = 6, MAX_SEND = 6 };

typedef struct {
  weft__btree_node node[2];
  size_t off[2], bytes[2];     /* the half each tree carries, in bytes */
  char *kid[2][2], *partial[2]; /* scratch */
  int reduced[2];              /* the up-phase combine of tree t ran */
  weft__req recv[MAX_RECV], send[MAX_SEND];
  int recv_tree[MAX_RECV], recv_up[MAX_RECV];
  int send_tree[MAX_SEND], send_up[MAX_SEND], send_peer[MAX_SEND];
  int nrecv, nsend, posted_send;
} tr_state;

static void post(weft__task *t, weft__req *q, int peer) {
  if (q->bytes == 0) q->complete = 1;
  else weft__req_post(weft__comm_conn(t->comm, peer), q);
}

/* 1 when every receive of tree `tree` of the given direction completed. */
static int recvs_done(const tr_state *st, int tree, int up) {
  for (int i = 0; i < st->nrecv; i++)
    if (st->recv_tree[i] == tree && st->recv_up[i] == up && !st->recv[i].complete) return 0;
  return 1;
}

/* The up-phase combine of tree k once its children's partials are in: into recvbuf on the
 * root (then WEFT_AVG divides), into the partial scratch on an inner rank. */
static void combine(weft__task *t, tr_state *st, int k) {
  const weft__btree_node *nd = &st->node[k];
  size_t esize = weft__dtype_size(t->dtype), count = st->bytes[k] / esize;
  const char *mine = (const char *)t->sendbuf + st->off[k];
  char *dst = nd->parent < 0 ? (char *)t->recvbuf + st->off[k] : st->partial[k];
  st->reduced[k] = 1;
  if (nd->child[0] < 0) return; /* a leaf sends its input */
  if (count > 0) {
    /* The root's only child holds the higher labels; an inner rank's child 0 the lower. */
    if (nd->parent < 0) weft__mem_reduce(t->mem, dst, mine, st->kid[k][0], count, t->dtype, t->op);
    else weft__mem_reduce(t->mem, dst, st->kid[k][0], mine, count, t->dtype, t->op);
    if (nd->child[1] >= 0) weft__mem_reduce(t->mem, dst, dst, st->kid[k][1], count, t->dtype, t->op);
  }
  if (nd->parent < 0 && t->op == WEFT_AVG) weft__mem_avg(t->mem, dst, count, t->dtype, t->comm->nranks);
}

/* 1 when send i's data is ready. */
static int send_ready(weft__task *t, tr_state *st, int i) {
  int k = st->send_tree[i];
  if (!st->reduced[k] && recvs_done(st, k, 1)) combine(t, st, k);
  if (st->send_up[i]) return st->reduced[k];
  return st->node[k].parent < 0 ? st->reduced[k] : recvs_done(st, k, 0);
}

static void post_sends(weft__task *t, tr_state *st) {
  while (st->posted_send < st->nsend && send_ready(t, st, st->posted_send)) {
    int i = st->posted_send++;
    int k = st->send_tree[i];
    const weft__btree_node *nd = &st->node[k];
    const char *src = (const char *)t->recvbuf + st->off[k];
    if (st->send_up[i]) src = nd->child[0] < 0 ? (const char *)t->sendbuf + st->off[k] : st->partial[k];
    weft__req_init_send(&st->send[i], t->mem, src, st->bytes[k]);
    post(t, &st->send[i], st->send_peer[i]);
  }
}

static void add_recv(weft__task *t, tr_state *st, int k, int up, int peer, void *dst) {
  int i = st->nrecv++;
  st->recv_tree[i] = k;
  st->recv_up[i] = up;
  weft__req_init_recv(&st->recv[i], t->mem, dst, NULL, st->bytes[k], t->dtype, t->op);
  post(t, &st->recv[i], peer);
}

static void add_send(tr_state *st, int k, int up, int peer) {
  int i = st->nsend++;
  st->send_tree[i] = k;
  st->send_up[i] = up;
  st->send_peer[i] = peer;
}

/* Posts every receive and lists every send, both in the canonical order. */
static void plan(weft__task *t, tr_state *st) {
  for (int k = 0; k < 2; k++)
    for (int c = 0; c < 2; c++)
      if (st->node[k].child[c] >= 0) add_recv(t, st, k, 1, st->node[k].child[c], st->kid[k][c]);
  for (int k = 0; k < 2; k++)
    if (st->node[k].parent >= 0)
      add_recv(t, st, k, 0, st->node[k].parent, (char *)t->recvbuf + st->off[k]);
  for (int k = 0; k < 2; k++)
    if (st->node[k].parent >= 0) add_send(st, k, 1, st->node[k].parent);
  for (int k = 0; k < 2; k++)
    for (int c = 0; c < 2; c++)
      if (st->node[k].child[c] >= 0) add_send(st, k, 0, st->node[k].child[c]);
}

static weft_status_t tr_start(weft__task *t) {
  int n = t->comm->nranks, r = t->comm->rank;
  size_t esize = weft__dtype_size(t->dtype), bytes = t->count * esize;
  size_t b0 = (t->count + 1) / 2 * esize, b1 = bytes - b0;
  size_t s0 = weft__align_up(b0, 64), s1 = weft__align_up(b1, 64);
  size_t hdr = weft__align_up(sizeof(tr_state), 64);
  int run = n > 1 && bytes > 0;
  weft_status_t status;
  tr_state *st = weft__algo_state_alloc(t, hdr, run ? 3 * (s0 + s1) : 0, &status);
  if (st == NULL) return status;
  if (!run) {
    if (t->sendbuf != t->recvbuf) weft__mem_copy(t->mem, t->recvbuf, t->sendbuf, bytes, 0);
    return WEFT_SUCCESS;
  }
  st->off[0] = 0, st->bytes[0] = b0;
  st->off[1] = b0, st->bytes[1] = b1;
  char *p = (char *)st + hdr;
  st->kid[0][0] = p, st->kid[0][1] = p + s0, st->partial[0] = p + 2 * s0;
  p += 3 * s0;
  st->kid[1][0] = p, st->kid[1][1] = p + s1, st->partial[1] = p + 2 * s1;
  for (int k = 0; k < 2; k++) st->node[k] = weft__dtree_node(r, n, k);
  plan(t, st);
  post_sends(t, st);
  return WEFT_SUCCESS;
}

static weft_status_t tr_progress(weft__task *t) {
  tr_state *st = t->state;
  post_sends(t, st);
  if (st->posted_send < st->nsend) return WEFT_IN_PROGRESS;
  for (int i = 0; i < st->nsend; i++)
    if (!st->send[i].complete) return WEFT_IN_PROGRESS;
  for (int i = 0; i < st->nrecv; i++)
    if (!st->recv[i].complete) return WEFT_IN_PROGRESS;
  return WEFT_SUCCESS;
}

/* Up: L levels receiving both halves into scratch and reducing; down: L levels. */
static double tr_cost(const weft__cost_in *c) {
  return 2 * c->L * c->a + c->L * c->bytes * (3 * c->b + c->g);
}

const weft__algo weft__algo_all_reduce_tree = {
    .name = "tree", .coll = WEFT__COLL_ALL_REDUCE, .start = tr_start, .progress = tr_progress,
    .cost = tr_cost, .max_bytes = 512 << 10, .spaces = WEFT__MEM_KINDS_CPU};

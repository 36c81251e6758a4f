/* patterns.h: pure pattern maths of the log-depth algorithms (binomial trees, recursive
 * doubling and halving with the non-power-of-two fold, Bruck steps). No transports, no
 * state: static inline functions that unit tests exercise alone and that every rank
 * evaluates to the same answer from (rank, nranks, root).
 *
 * Binomial tree over "virtual ranks" v = (rank - root) mod n, so the root is v = 0 (the
 * broadcast and reduce lay it over the communicator's ring order instead:
 * weft__binomial_ring_vrank).
 *   The parent of v > 0 is v with its lowest set bit cleared; the children of v are
 *   v + m for each power of two m below v's lowest set bit (below the first power of two
 *   >= n for the root) with v + m < n. The subtree of v + m holds v+m .. v+2m-1 (clipped
 *   to n), so children in increasing m cover v's subtree in increasing virtual order.
 *
 * Non-power-of-two fold (Thakur, Rabenseifner & Gropp 2005, section 4.1, mirrored so the
 * lower rank keeps the data): let p2 be the largest power of two <= n and rem = n - p2.
 * Of the first 2*rem ranks the odd ones hand their input to rank-1 and wait for the
 * result; the rest form p2 "new ranks" numbered in rank order: rank r < 2 rem has new rank
 * r/2, rank r >= 2 rem has new rank r - rem. Each new rank's data covers a contiguous,
 * increasing range of real ranks, so "lower new rank op higher new rank" is rank order.
 *
 * Double binary tree (NCCL's, Sanders, Speck & Traeff 2009): tree 0 is an in-order binary
 *   tree over ranks 0..n-1: rank r > 0 with lowest set bit b has children r - b/2 and the
 *   highest r + b'/2 < n (b' <= b), and parent (r ^ b) | 2b, or r ^ b when that is >= n;
 *   rank 0 is the root, with one child: the highest power of two below n. All odd ranks are
 *   leaves. Tree 1 is tree 0 over relabelled ranks: mirrored (r -> n-1-r) for even n,
 *   shifted (r -> r+1 mod n) for odd n, so most leaves of one tree are inner nodes of the
 *   other and each tree's root and links carry half the data.
 *
 * Bruck all-gather: ceil(log2 n) steps; at step k rank r sends the min(2^k, n - 2^k)
 * blocks it holds (its own first, rotated so block 0 is rank r's) to r - 2^k and receives
 * as many from r + 2^k, appended after the 2^k it has. A final rotation puts block i of
 * the scratch at position (r + i) mod n (Bruck et al., IEEE TPDS 1997). */
#ifndef WEFT_ALGOS_PATTERNS_H
#define WEFT_ALGOS_PATTERNS_H
#include "algos/ring.h"

/* weft__ceil_log2 and weft__pow2_floor live in lib/algo.h (the cost model uses them too). */

/* ---- binomial tree ---- */
static inline int weft__binomial_vrank(int rank, int root, int n) {
  return weft__ring_mod((long long)rank - root, n);
}
static inline int weft__binomial_real(int vrank, int root, int n) {
  return weft__ring_mod((long long)vrank + root, n);
}
/* The same tree laid over a communicator's ring order (algos/ring.h: topology order, ranks
 * sharing a host, a NUMA node or a core next to each other) instead of rank order, so each
 * subtree holds ring neighbours. With n a power of two, v = ring position XOR the root's:
 * every subtree is an aligned block of ring positions (v .. v+2m-1 with v a multiple of
 * 2m), whichever the root, so groups that fill aligned blocks (2 hosts of 2 ranks, 2 cores
 * of 2) see one crossing message, the root's; otherwise v counts ring positions from the
 * root's. With more ranks than cores, where weftrun binds rank r to core r mod ncores, rank
 * order gave one core both the root and the one forwarding rank (4 ranks on 2 cores: core 0
 * ran 4 of a broadcast's 6 sends and receives, and every call waited for it). Every rank
 * has the same ring, so all agree on the tree. */
static inline int weft__binomial_ring_vrank(const struct weft_comm *c, int rank, int root) {
  int pos = weft__comm_ring_pos(c, rank), root_pos = weft__comm_ring_pos(c, root), n = c->nranks;
  return (n & (n - 1)) == 0 ? pos ^ root_pos : weft__binomial_vrank(pos, root_pos, n);
}
static inline int weft__binomial_ring_real(const struct weft_comm *c, int vrank, int root) {
  int root_pos = weft__comm_ring_pos(c, root), n = c->nranks;
  return weft__comm_ring_rank(c, (n & (n - 1)) == 0 ? vrank ^ root_pos : (long long)root_pos + vrank);
}
/* The parent's virtual rank, or -1 for the root. */
static inline int weft__binomial_parent(int v) { return v == 0 ? -1 : v & (v - 1); }
/* v's farthest child is v + this (a power of two m; its children are v + m, v + m/2, ...,
 * v + 1), or 0 when v has none (n ranks). The offsets are bounded by half of v's lowest set
 * bit (the root: none) and by the ranks after v, both powers of two once floored. */
static inline int weft__binomial_farthest(int v, int n) {
  if (v >= n - 1) return 0;
  int room = weft__pow2_floor(n - 1 - v);
  int low = (v & -v) / 2;
  return v == 0 || room < low ? room : low;
}
/* Number of children of v (n ranks): one per power of two up to the farthest offset. */
static inline int weft__binomial_nchildren(int v, int n) {
  int m = weft__binomial_farthest(v, n);
  return m == 0 ? 0 : __builtin_ctz((unsigned)m) + 1;
}

/* ---- recursive doubling / halving with the fold ---- */
typedef struct weft__rd_fold {
  int p2;      /* ranks taking part in the power-of-two phase */
  int rem;     /* n - p2 */
  int newrank; /* this rank's number among the p2, or -1 if it folds away */
  int partner; /* the fold partner's real rank (r+1 for an even r < 2 rem, r-1 for an odd
                  one), -1 when this rank has none */
} weft__rd_fold;

static inline weft__rd_fold weft__rd_fold_of(int rank, int n) {
  weft__rd_fold f;
  f.p2 = weft__pow2_floor(n);
  f.rem = n - f.p2;
  f.partner = -1;
  if (rank < 2 * f.rem) {
    f.newrank = rank % 2 == 0 ? rank / 2 : -1;
    f.partner = rank % 2 == 0 ? rank + 1 : rank - 1;
  } else {
    f.newrank = rank - f.rem;
  }
  return f;
}
/* The real rank of new rank v. */
static inline int weft__rd_real(int v, int rem) { return v < rem ? 2 * v : v + rem; }

/* ---- double binary tree ---- */
typedef struct weft__btree_node {
  int parent;      /* real rank, -1 for the root */
  int child[2];    /* real ranks, -1 when absent */
} weft__btree_node;

/* Tree 0's links of label r (labels are ranks in tree 0). */
static inline weft__btree_node weft__btree_label(int r, int n) {
  weft__btree_node t = {-1, {-1, -1}};
  if (r == 0) {
    if (n > 1) t.child[0] = weft__pow2_floor(n - 1);
    return t;
  }
  int bit = r & -r;
  t.parent = (r ^ bit) | (bit << 1);
  if (t.parent >= n) t.parent = r ^ bit;
  if (bit == 1) return t;
  t.child[0] = r - bit / 2;
  int h = bit / 2;
  while (h >= 1 && r + h >= n) h /= 2;
  if (h >= 1) t.child[1] = r + h;
  return t;
}

/* Label of rank r in tree `tree` (0 or 1), and back. */
static inline int weft__dtree_label(int r, int n, int tree) {
  if (tree == 0) return r;
  return n % 2 == 0 ? n - 1 - r : weft__ring_mod((long long)r + 1, n);
}
static inline int weft__dtree_rank(int label, int n, int tree) {
  if (tree == 0 || label < 0) return label;
  return n % 2 == 0 ? n - 1 - label : weft__ring_mod((long long)label - 1, n);
}

/* Rank r's links in tree `tree`, as real ranks. */
static inline weft__btree_node weft__dtree_node(int r, int n, int tree) {
  weft__btree_node t = weft__btree_label(weft__dtree_label(r, n, tree), n);
  t.parent = weft__dtree_rank(t.parent, n, tree);
  t.child[0] = weft__dtree_rank(t.child[0], n, tree);
  t.child[1] = weft__dtree_rank(t.child[1], n, tree);
  return t;
}

/* ---- Bruck ---- */
/* Blocks moved at step k (distance 2^k) of a Bruck all-gather over n ranks. */
static inline int weft__bruck_blocks(int n, int k) {
  int d = 1 << k;
  return d < n - d ? d : n - d;
}
#endif

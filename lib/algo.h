/* algo.h: what an algorithm is to the core: its row in the registry (how it runs, what the
 * tuner's cost model charges for it, where it may run), and the communicator services an
 * algorithm may use (its state, the communicator's kept scratch).
 *
 * Each algorithm file (algos/<collective>/<algorithm>.c) defines its row beside its code:
 *   const weft__algo weft__algo_all_reduce_ring = {
 *       .name = "ring", .coll = WEFT__COLL_ALL_REDUCE, .start = ar_start,
 *       .progress = ar_progress, .cost = ar_cost, .spaces = WEFT__MEM_KINDS_CPU};
 * algos/algos.h declares every row and algos/registry.c lists them in the tuner's order
 * (ties go to the earlier row; WEFT_ALGO's lists name rows of a collective in this order).
 * lib/select.c reads only weft__algo_table below, so the core names no algorithm and lib/
 * never includes algos/ (the suite checks: tests/include_rules.sh).
 *
 * The cost model (Hockney's alpha-beta model as NCCL's tuner uses it), per call in us:
 *     time = steps * alpha + bytes on the critical path * beta + bytes reduced * gamma,
 * with alpha, beta, gamma from the transport in use (each transport's .model row,
 * transports/transport.h; WEFT_TUNER_MODEL replaces them). A row's cost function gets the
 * parameters already scaled for oversubscription, per byte, in weft__cost_in. */
#ifndef WEFT_LIB_ALGO_H
#define WEFT_LIB_ALGO_H
#include <stddef.h>
#include "weft.h"
#include "lib/task.h"
#include "mem/space.h"

/* The most hosts the two-level (hierarchical) algorithms group ranks into; beyond it the
 * tuner rules them out (algos/hier.h builds its grouping in arrays of this size). */
enum { WEFT__HIER_MAX_HOSTS = 256 };

/* What a cost function sees: every value identical on all ranks of a communicator. */
typedef struct weft__cost_in {
  double a;           /* alpha of one dependent step, us (oversubscription included) */
  double b, g;        /* beta (moved) and gamma (reduced), us per byte */
  double n, bytes, chunk; /* ranks; the bytes the tuner sees (select.h); pipeline chunk */
  int L;              /* ceil(log2 n) */
  int oversub;        /* more ranks on a host than cores */
  int p2, rem;        /* the recursive-doubling fold: largest power of two <= n, n - p2 */
  /* Two-level algorithms: hosts, fewest and most ranks on one, and the parameters of the
   * transport within a host (a_in ..) and across hosts (a_out ..), per byte. */
  int H, Lmin, Lmax;
  double a_in, b_in, g_in, a_out, b_out, g_out;
} weft__cost_in;

/* ceil(x / y) for x >= 0 (0 for x <= 0), as the cost functions count slices. */
static inline double weft__cost_ceil_div(double x, double y) {
  return x <= 0 ? 0 : (double)(long long)((x + y - 1) / y);
}
/* Smallest k with 2^k >= n (0 for n <= 1). One bit scan, not a loop: the binomial
 * broadcast asks it three times a call (callgrind: 27 of a 2-rank 8-byte call's instructions
 * as a loop). */
static inline int weft__ceil_log2(int n) {
  return n <= 1 ? 0 : 32 - __builtin_clz((unsigned)n - 1u);
}
/* Largest power of two <= n (n >= 1). */
static inline int weft__pow2_floor(int n) {
  return n <= 1 ? 1 : (int)(1u << (31 - __builtin_clz((unsigned)n)));
}

struct weft__algo {
  const char *name;   /* "ring", "chain", "pairwise", ... (WEFT_ALGO, traces, weft-tune) */
  weft__coll_t coll;
  /* Allocates t->state, posts the first requests. Errors end the task. */
  weft_status_t (*start)(struct weft__task *t);
  /* Advances after requests moved: WEFT_IN_PROGRESS, WEFT_SUCCESS when done, or an error. */
  weft_status_t (*progress)(struct weft__task *t);
  /* The tuner's estimate in us (INFINITY: not for this layout); NULL when the row is its
   * collective's only algorithm, or is taken by `wanted` rather than by cost. */
  double (*cost)(const weft__cost_in *c);
  size_t max_bytes;   /* above this the model does not consider it (0: no cap); a forced
                         (WEFT_ALGO) algorithm runs at any size */
  unsigned spaces;    /* the memory kinds of user buffers it handles (WEFT__MEM_KIND_BIT of
                         mem/space.h; WEFT__MEM_KINDS_CPU for one that touches them only
                         through the space and keeps host scratch): no row, no run */
  unsigned needs;     /* transport capabilities every peer's transport must have
                         (WEFT__TRANSPORT_CAP_* of transports/transport.h); 0: any */
  /* Non-NULL: not a tuner candidate; the row runs whenever this says 1 for the task (the
   * direct algorithms on registered windows). Depends only on values equal on all ranks. */
  int (*wanted)(const struct weft__task *t);
};

/* The registry: every algorithm row, in the tuner's order (algos/registry.c). */
extern const weft__algo *const weft__algo_table[];
extern const int weft__algo_table_len;

/* hdr + extra zeroed bytes as t->state: inside the task when they fit in its state_inline
 * (no allocation), else allocated (freed with the task); on failure raises
 * WEFT_ERR_NO_MEMORY naming the rank and operation, stores it in *st and returns NULL. */
void *weft__algo_state_alloc(struct weft__task *t, size_t hdr, size_t extra, weft_status_t *st);
/* The same, not zeroed: for an algorithm that sets every field it reads, as those that run
 * small messages do (zeroing a 2-request state was 6-9% of the samples of an 8-byte
 * broadcast's receiver, perf). */
void *weft__algo_state_take(struct weft__task *t, size_t hdr, size_t extra, weft_status_t *st);
/* The communicator's kept scratch (host memory), at least bytes long (grown when needed;
 * its contents are not kept). Valid until the task ends. On failure raises
 * WEFT_ERR_NO_MEMORY naming the rank and operation, stores it in *st and returns NULL. */
void *weft__comm_scratch(struct weft__task *t, size_t bytes, weft_status_t *st);
static inline size_t weft__align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
/* Block b's [begin, end) of count elements cut in n near-equal blocks (the first
 * count % n blocks one element longer). */
static inline void weft__direct_block(size_t count, int n, int b, size_t *begin, size_t *end) {
  size_t q = count / (size_t)n, r = count % (size_t)n, ub = (size_t)b;
  *begin = ub * q + (ub < r ? ub : r);
  *end = *begin + q + (ub < r ? 1 : 0);
}
#endif

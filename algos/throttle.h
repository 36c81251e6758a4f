/* throttle.h: how many steps of the pairwise exchanges (all_to_all/pairwise.c,
 * all_to_allv/pairwise.c, all_gather/linear.c; their driver, algos/exchange.h) may be in
 * flight at once.
 *
 * Posting all n-1 steps of a pairwise exchange at once lets every rank aim n-1 messages at
 * the network together: fine for a handful of ranks, but at hundreds it floods receive
 * queues and switches (incast) and pins n-1 requests per call. A throttle of W steps keeps
 * at most W steps in flight: step s is posted once steps 1 .. s-W have completed. Steps are
 * matched across ranks by number (rank r's step s sends to r+s, whose step s receives from
 * r), and every rank posts steps in increasing order, so steps 1 .. W are posted everywhere
 * at the start and each completed step frees the next: no deadlock for any W >= 1.
 * W = WEFT_A2A_THROTTLE (default 8; WEFT_A2A_WINDOW, its old name, still works; UCC and
 * Open MPI bound theirs likewise, and MPICH's MPIR_CVAR_ALLTOALL_THROTTLE names the idea). */
#ifndef WEFT_ALGOS_THROTTLE_H
#define WEFT_ALGOS_THROTTLE_H
#include <stdatomic.h>
#include "lib/env.h"

#define WEFT__A2A_THROTTLE_DEFAULT 8

/* Steps in flight for an exchange of nsteps steps: WEFT_A2A_THROTTLE, read once, clamped to
 * [1, nsteps]. */
static inline int weft__a2a_throttle(int nsteps) {
  static _Atomic int cached; /* 0: not read yet */
  int w = atomic_load_explicit(&cached, memory_order_relaxed);
  if (w == 0) {
    long v = weft__env_long(weft__env_name("WEFT_A2A_THROTTLE", "WEFT_A2A_WINDOW"),
                            WEFT__A2A_THROTTLE_DEFAULT);
    w = v < 1 ? 1 : v > 1 << 20 ? 1 << 20 : (int)v;
    atomic_store_explicit(&cached, w, memory_order_relaxed);
  }
  return w < nsteps ? w : nsteps;
}
#endif

/* select.c: picks the algorithm that runs a task.
 *
 * Today one algorithm per collective, kept as data (a table indexed by collective) rather
 * than nested ifs, so the tuner can later replace a row with measured choices by size and
 * rank count without touching the algorithms. Every rank computes the same choice from the
 * same arguments, so all ranks always run the same algorithm. */
#include <stddef.h>
#include "lib/task.h"

static const weft__algo *const default_algo[WEFT__NUM_COLLS] = {
    [WEFT__COLL_ALL_REDUCE] = &weft__algo_all_reduce_ring,
    [WEFT__COLL_BROADCAST] = &weft__algo_broadcast_chain,
    [WEFT__COLL_REDUCE] = &weft__algo_reduce_chain,
    [WEFT__COLL_ALL_GATHER] = &weft__algo_all_gather_ring,
    [WEFT__COLL_REDUCE_SCATTER] = &weft__algo_reduce_scatter_ring,
    [WEFT__COLL_ALL_TO_ALL] = &weft__algo_all_to_all_pairwise,
    [WEFT__COLL_ALL_TO_ALLV] = &weft__algo_all_to_allv_pairwise,
    [WEFT__COLL_GATHER] = &weft__algo_gather_linear,
    [WEFT__COLL_SCATTER] = &weft__algo_scatter_linear,
    [WEFT__COLL_BARRIER] = &weft__algo_barrier_dissemination,
    [WEFT__COLL_SEND] = &weft__algo_p2p,
    [WEFT__COLL_RECV] = &weft__algo_p2p,
    [WEFT__COLL_P2P_GROUP] = &weft__algo_p2p,
};

const weft__algo *weft__select_algo(const weft__task *t) {
  if ((unsigned)t->coll >= WEFT__NUM_COLLS) return NULL;
  return default_algo[t->coll];
}

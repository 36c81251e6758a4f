/* registry.c: the algorithm rows the tuner reads (lib/algo.h), in its order: within a
 * collective, ties go to the earlier row and WEFT_ALGO's lists number rows in this order.
 * The direct rows carry `wanted` and are no tuner candidates. */
#include "algos/algos.h"

const weft__algo *const weft__algo_table[] = {
    &weft__algo_all_reduce_ring,
    &weft__algo_all_reduce_recursive_doubling,
    &weft__algo_all_reduce_rabenseifner,
    &weft__algo_all_reduce_tree,
    &weft__algo_all_reduce_hierarchical,
    &weft__algo_all_reduce_direct,
    &weft__algo_all_gather_ring,
    &weft__algo_all_gather_bruck,
    &weft__algo_all_gather_linear,
    &weft__algo_all_gather_hierarchical,
    &weft__algo_all_gather_direct,
    &weft__algo_broadcast_chain,
    &weft__algo_broadcast_binomial,
    &weft__algo_broadcast_hierarchical,
    &weft__algo_broadcast_direct,
    &weft__algo_reduce_chain,
    &weft__algo_reduce_binomial,
    &weft__algo_reduce_scatter_ring,
    &weft__algo_reduce_scatter_recursive_doubling,
    &weft__algo_reduce_scatter_hierarchical,
    &weft__algo_reduce_scatter_direct,
    &weft__algo_all_to_all_pairwise,
    &weft__algo_all_to_all_bruck,
    &weft__algo_all_to_all_direct,
    &weft__algo_all_to_allv_pairwise,
    &weft__algo_gather_linear,
    &weft__algo_scatter_linear,
    &weft__algo_barrier_dissemination,
    &weft__algo_send,
    &weft__algo_recv,
    &weft__algo_p2p_group,
};
const int weft__algo_table_len = (int)(sizeof weft__algo_table / sizeof weft__algo_table[0]);

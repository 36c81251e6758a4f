/* algos.h: every algorithm's row (lib/algo.h), declared in one place. Each is defined
 * beside its code in algos/<collective>/<algorithm>.c; algos/registry.c lists them for the
 * tuner. Adding an algorithm: write its file with its row, declare the row here, list it
 * in registry.c, and add the file to algos/Makefile.inc. */
#ifndef WEFT_ALGOS_ALGOS_H
#define WEFT_ALGOS_ALGOS_H
#include "lib/algo.h"

extern const weft__algo weft__algo_all_reduce_ring;
extern const weft__algo weft__algo_all_reduce_recursive_doubling;
extern const weft__algo weft__algo_all_reduce_rabenseifner;
extern const weft__algo weft__algo_all_reduce_tree;
extern const weft__algo weft__algo_all_reduce_hierarchical;
extern const weft__algo weft__algo_all_reduce_direct;
extern const weft__algo weft__algo_all_gather_ring;
extern const weft__algo weft__algo_all_gather_bruck;
extern const weft__algo weft__algo_all_gather_linear;
extern const weft__algo weft__algo_all_gather_hierarchical;
extern const weft__algo weft__algo_all_gather_direct;
extern const weft__algo weft__algo_broadcast_chain;
extern const weft__algo weft__algo_broadcast_binomial;
extern const weft__algo weft__algo_broadcast_hierarchical;
extern const weft__algo weft__algo_broadcast_direct;
extern const weft__algo weft__algo_reduce_chain;
extern const weft__algo weft__algo_reduce_binomial;
extern const weft__algo weft__algo_reduce_scatter_ring;
extern const weft__algo weft__algo_reduce_scatter_recursive_doubling;
extern const weft__algo weft__algo_reduce_scatter_hierarchical;
extern const weft__algo weft__algo_reduce_scatter_direct;
extern const weft__algo weft__algo_all_to_all_pairwise;
extern const weft__algo weft__algo_all_to_all_bruck;
extern const weft__algo weft__algo_all_to_all_direct;
extern const weft__algo weft__algo_all_to_allv_pairwise;
extern const weft__algo weft__algo_gather_linear;
extern const weft__algo weft__algo_scatter_linear;
extern const weft__algo weft__algo_barrier_dissemination;
extern const weft__algo weft__algo_send;
extern const weft__algo weft__algo_recv;
extern const weft__algo weft__algo_p2p_group;
#endif

/* algos.h: the algorithms added beyond the foundation's (lib/task.h declares those), for
 * the selection in lib/select.c and for tests. */
#ifndef WEFT_ALGOS_ALGOS_H
#define WEFT_ALGOS_ALGOS_H
#include "lib/task.h"

extern const weft__algo weft__algo_all_reduce_recursive_doubling;
extern const weft__algo weft__algo_all_reduce_rabenseifner;
extern const weft__algo weft__algo_all_reduce_tree;
extern const weft__algo weft__algo_all_reduce_hierarchical;
extern const weft__algo weft__algo_all_gather_bruck;
extern const weft__algo weft__algo_all_to_all_bruck;
extern const weft__algo weft__algo_broadcast_binomial;
extern const weft__algo weft__algo_reduce_binomial;
#endif

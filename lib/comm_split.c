/* comm_split.c: weft_comm_split, NCCL's ncclCommSplit over a parent communicator.
 *
 * Two all-gathers over the parent, then an ordinary init of each child:
 *   1. every rank's (color, key, whether its own arguments are valid): every rank then sees
 *      the same table, so a bad argument anywhere fails on every rank alike, naming the rank;
 *   2. each color's leader (its lowest parent rank) creates a unique id (weft_get_unique_id:
 *      the child's bootstrap root runs in the leader's process) and every rank all-gathers
 *      (status, id): a member takes its leader's id, so no id travels out of band.
 * A child's ranks are its members ordered by key, ties by parent rank (as NCCL). Each child
 * then runs weft_comm_init_rank_config with the caller's config (the parent's timeout when
 * NULL or undefined). Cost: two parent all-gathers (12 and 132 bytes per rank) plus a child
 * init. */
#include <stdlib.h>
#include <string.h>
#include "lib/comm.h"
#include "lib/group.h"
#include "lib/status.h"

typedef struct {
  int32_t color, key, valid;
} split_entry;

typedef struct {
  int32_t status; /* the leader's weft_get_unique_id status; WEFT_SUCCESS elsewhere */
  weft_unique_id_t id;
} split_id;

static int config_valid(const weft_config_t *cfg) {
  if (cfg == NULL) return 1;
  if (cfg->magic != WEFT_CONFIG_MAGIC || cfg->size < sizeof(weft_config_t)) return 0;
  if (cfg->timeout_ms != WEFT_CONFIG_UNDEF_INT && cfg->timeout_ms <= 0) return 0;
  return cfg->blocking == WEFT_CONFIG_UNDEF_INT || cfg->blocking == 0 || cfg->blocking == 1;
}

/* The first rank whose entry is invalid, or -1. */
static int first_invalid(const split_entry *all, int nranks) {
  for (int p = 0; p < nranks; p++)
    if (!all[p].valid || (all[p].color < 0 && all[p].color != WEFT_SPLIT_NOCOLOR)) return p;
  return -1;
}

/* The lowest parent rank of color (the leader), this rank's place in the child (members
 * ordered by key, then parent rank) and the child's size. */
static void place_in_child(const split_entry *all, int nranks, int me, int *leader, int *rank,
                           int *size) {
  *leader = -1, *rank = 0, *size = 0;
  for (int p = 0; p < nranks; p++) {
    if (all[p].color != all[me].color) continue;
    if (*leader < 0) *leader = p;
    (*size)++;
    if (all[p].key < all[me].key || (all[p].key == all[me].key && p < me)) (*rank)++;
  }
}

static weft_status_t gather_ids(struct weft_comm *comm, int is_leader, split_id *ids) {
  split_id mine;
  memset(&mine, 0, sizeof(mine));
  if (is_leader) mine.status = weft_get_unique_id(&mine.id);
  return weft_all_gather(&mine, ids, sizeof(mine), WEFT_UINT8, comm, NULL);
}

static weft_status_t init_child(struct weft_comm *comm, const split_id *lead, int leader, int rank,
                                int size, weft_comm_t *newcomm, const weft_config_t *config) {
  if (lead->status != WEFT_SUCCESS)
    return weft__error(comm, (weft_status_t)lead->status,
                       "rank %d: comm_split: leader rank %d of this color could not create the "
                       "child's unique id (%s)", comm->rank, leader,
                       weft_get_error_string((weft_status_t)lead->status));
  weft_config_t cfg = WEFT_CONFIG_INITIALIZER;
  if (config != NULL) cfg = *config, cfg.size = sizeof(cfg);
  if (cfg.timeout_ms == WEFT_CONFIG_UNDEF_INT) cfg.timeout_ms = comm->timeout_ms;
  return weft_comm_init_rank_config(newcomm, size, lead->id, rank, &cfg);
}

static weft_status_t split_with(struct weft_comm *comm, const split_entry *all, weft_comm_t *newcomm,
                                const weft_config_t *config) {
  int nranks = comm->nranks, me = comm->rank;
  int bad = first_invalid(all, nranks);
  if (bad >= 0)
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT,
                       "rank %d: comm_split: rank %d passed color %d (must be >= 0 or "
                       "WEFT_SPLIT_NOCOLOR), a NULL newcomm or a config not from "
                       "WEFT_CONFIG_INITIALIZER", me, bad, (int)all[bad].color);
  int leader, rank, size;
  place_in_child(all, nranks, me, &leader, &rank, &size);
  int is_leader = all[me].color != WEFT_SPLIT_NOCOLOR && leader == me;
  split_id *ids = calloc((size_t)nranks, sizeof(*ids));
  if (ids == NULL) return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: comm_split: out of memory", me);
  weft_status_t st = gather_ids(comm, is_leader, ids);
  if (st == WEFT_SUCCESS && all[me].color != WEFT_SPLIT_NOCOLOR)
    st = init_child(comm, &ids[leader], leader, rank, size, newcomm, config);
  free(ids);
  return st;
}

weft_status_t weft_comm_split(weft_comm_t comm, int color, int key, weft_comm_t *newcomm,
                              const weft_config_t *config) {
  if (comm == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_split: comm is NULL");
  if (weft__group_active())
    return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                       "rank %d: comm_split: not allowed between weft_group_start and weft_group_end",
                       comm->rank);
  if (newcomm != NULL) *newcomm = NULL;
  split_entry mine = {color, key, newcomm != NULL && config_valid(config)};
  split_entry *all = calloc((size_t)comm->nranks, sizeof(*all));
  if (all == NULL)
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: comm_split: out of memory", comm->rank);
  weft_status_t st = weft_all_gather(&mine, all, sizeof(mine), WEFT_UINT8, comm, NULL);
  if (st == WEFT_SUCCESS) st = split_with(comm, all, newcomm, config);
  free(all);
  return st;
}

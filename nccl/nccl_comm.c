/* nccl_comm.c: NCCL's communicator calls on weft communicators: ids, init (rank, config,
 * all, scalable), split, shrink, finalize, destroy, abort, revoke and the queries. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "nccl/nccl_internal.h"

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId) {
  if (uniqueId == NULL) return nccl__fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  weft_unique_id_t id;
  weft_status_t st = weft_get_unique_id(&id);
  if (st == WEFT_SUCCESS) memcpy(uniqueId->internal, id.internal, sizeof(id.internal));
  return nccl__from_weft(st);
}

static ncclResult_t init_rank(ncclComm_t *comm, int nranks, const char *idbytes, int rank,
                              const ncclConfig_t *config, const char *what) {
  if (comm == NULL) return nccl__fail(ncclInvalidArgument, "%s: comm is NULL", what);
  *comm = NULL;
  weft_config_t cfg;
  ncclResult_t r = nccl__config(config, &cfg, what);
  if (r != ncclSuccess) return r;
  weft_unique_id_t id;
  memcpy(id.internal, idbytes, sizeof(id.internal));
  /* Inside a group a blocking init is started non-blocking and awaited at the outermost
   * ncclGroupEnd, so one thread can init several ranks of a communicator (as NCCL allows). */
  int deferred = nccl__in_group() && cfg.blocking;
  if (deferred) cfg.blocking = 0;
  weft_comm_t w = NULL;
  weft_status_t st = weft_comm_init_rank_config(&w, nranks, id, rank, &cfg);
  if (st != WEFT_SUCCESS && st != WEFT_IN_PROGRESS) return nccl__from_weft(st);
  r = nccl__wrap(w, rank, nranks, comm);
  if (r == ncclSuccess && deferred) return nccl__group_defer_init(*comm);
  return r != ncclSuccess ? r : nccl__from_weft(st);
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId,
         int rank, ncclConfig_t *config) {
  return init_rank(comm, nranks, commId.internal, rank, config, "ncclCommInitRankConfig");
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank(comm, nranks, commId.internal, rank, NULL, "ncclCommInitRank");
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank, int nId,
         ncclUniqueId *commIds, ncclConfig_t *config) {
  if (nId < 1 || commIds == NULL)
    return nccl__fail(ncclInvalidArgument, "ncclCommInitRankScalable: needs at least one unique id (nId %d)", nId);
  return init_rank(newcomm, nranks, commIds[0].internal, myrank, config, "ncclCommInitRankScalable");
}

weft_status_t nccl__wait_init(weft_comm_t w) {
  weft_status_t st = WEFT_IN_PROGRESS;
  /* weft's init deadline ends the wait; yield, then nap, so ranks on shared cores run */
  for (unsigned round = 0; weft_comm_get_async_error(w, &st) == WEFT_SUCCESS && st == WEFT_IN_PROGRESS; round++) {
    if (round < 64) sched_yield();
    else nanosleep(&(struct timespec){0, 50000}, NULL);
  }
  return st;
}

/* ndev ranks in this process: each init starts non-blocking, then all are awaited. */
NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comm, int ndev, const int *devlist) {
  if (comm == NULL || ndev < 1)
    return nccl__fail(ncclInvalidArgument, "ncclCommInitAll: comm NULL or ndev %d < 1", ndev);
  ncclUniqueId id;
  ncclResult_t r = pncclGetUniqueId(&id);
  if (r != ncclSuccess) return r;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  for (int i = 0; i < ndev; i++) comm[i] = NULL;
  for (int i = 0; i < ndev && (r == ncclSuccess || r == ncclInProgress); i++)
    r = init_rank(&comm[i], ndev, id.internal, i, &cfg, "ncclCommInitAll");
  for (int i = 0; i < ndev && (r == ncclSuccess || r == ncclInProgress); i++)
    r = nccl__from_weft(nccl__wait_init(comm[i]->w));
  if (r == ncclSuccess) return r;
  for (int i = 0; i < ndev; i++)
    if (comm[i] != NULL) pncclCommAbort(comm[i]), comm[i] = NULL;
  return r;
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
         ncclConfig_t *config) {
  ncclResult_t r = nccl__check_comm(comm, "ncclCommSplit");
  if (r != ncclSuccess) return r;
  weft_config_t cfg;
  r = nccl__config(config, &cfg, "ncclCommSplit");
  if (r != ncclSuccess) return r;
  weft_comm_t child = NULL;
  /* A NULL newcomm is passed on so that every rank learns of it (weft fails all alike). */
  weft_status_t st = weft_comm_split(comm->w, color, key, newcomm == NULL ? NULL : &child, &cfg);
  if (newcomm != NULL) *newcomm = NULL;
  if (st != WEFT_SUCCESS && st != WEFT_IN_PROGRESS) return nccl__from_weft(st);
  int rank = 0, size = 0;
  if (child != NULL) weft_comm_user_rank(child, &rank), weft_comm_count(child, &size);
  r = nccl__wrap(child, rank, size, newcomm);
  return r != ncclSuccess ? r : nccl__from_weft(st);
}

static int excluded(const int *list, int n, int rank) {
  for (int i = 0; i < n; i++)
    if (list[i] == rank) return 1;
  return 0;
}

/* weft_comm_shrink is the one implementation (lib/comm_shrink.c): the lowest rank left makes
 * the new id and sends it over the revoke channel, not over comm (which may be broken). */
NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
         ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  if (comm == NULL) return nccl__fail(ncclInvalidArgument, "ncclCommShrink: comm is NULL");
  if (newcomm == NULL || excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == NULL) ||
      (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT))
    return nccl__fail(ncclInvalidArgument, "rank %d: ncclCommShrink: newcomm NULL, a bad exclude list or flags %d",
                      comm->rank, shrinkFlags);
  *newcomm = NULL;
  if (excluded(excludeRanksList, excludeRanksCount, comm->rank))
    return nccl__fail(ncclInvalidArgument, "rank %d: ncclCommShrink: an excluded rank must not call it", comm->rank);
  weft_config_t cfg;
  ncclResult_t r = nccl__config(config, &cfg, "ncclCommShrink");
  if (r != ncclSuccess) return r;
  /* NCCL_SHRINK_ABORT: the parent's operations in flight end first (on every rank). */
  if (shrinkFlags == NCCL_SHRINK_ABORT) weft_comm_revoke(comm->w), comm->revoked = 1;
  weft_comm_t w = NULL;
  weft_status_t st = weft_comm_shrink(comm->w, excludeRanksList, excludeRanksCount, &w, &cfg);
  if (st != WEFT_SUCCESS && st != WEFT_IN_PROGRESS) return nccl__from_weft(st);
  int rank = 0, size = 0;
  weft_comm_user_rank(w, &rank), weft_comm_count(w, &size);
  r = nccl__wrap(w, rank, size, newcomm);
  return r != ncclSuccess ? r : nccl__from_weft(st);
}

static void free_comm(ncclComm_t comm) {
  pthread_mutex_destroy(&comm->mu);
  free(comm);
}

/* Every call completes before it returns here: only a non-blocking init may be running. */
NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  if (comm == NULL) return nccl__fail(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
  weft_status_t st = WEFT_SUCCESS;
  weft_comm_get_async_error(comm->w, &st);
  return nccl__from_weft(st);
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess; /* NCCL accepts a NULL communicator here */
  weft_status_t st = weft_comm_destroy(comm->w);
  free_comm(comm);
  return nccl__from_weft(st);
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess;
  weft_status_t st = weft_comm_abort(comm->w);
  free_comm(comm);
  return nccl__from_weft(st);
}

NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  if (comm == NULL) return nccl__fail(ncclInvalidArgument, "ncclCommRevoke: comm is NULL");
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return nccl__fail(ncclInvalidArgument, "rank %d: ncclCommRevoke: flags must be 0, got %d", comm->rank, revokeFlags);
  comm->revoked = 1; /* this rank's later calls fail here, without entering weft */
  return nccl__from_weft(weft_comm_revoke(comm->w)); /* and every other rank's */
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError) {
  if (comm == NULL || asyncError == NULL)
    return nccl__fail(ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
  weft_status_t st = WEFT_SUCCESS;
  weft_status_t r = weft_comm_get_async_error(comm->w, &st);
  if (r != WEFT_SUCCESS) return nccl__from_weft(r);
  *asyncError = nccl__from_weft(st);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count) {
  if (comm == NULL || count == NULL) return nccl__fail(ncclInvalidArgument, "ncclCommCount: NULL argument");
  *count = comm->nranks;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank) {
  if (comm == NULL || rank == NULL) return nccl__fail(ncclInvalidArgument, "ncclCommUserRank: NULL argument");
  *rank = comm->rank;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device) {
  if (comm == NULL || device == NULL) return nccl__fail(ncclInvalidArgument, "ncclCommCuDevice: NULL argument");
  *device = -1;
  return nccl__fail(ncclInvalidUsage, "rank %d: ncclCommCuDevice: this communicator runs on host "
                    "memory, with no CUDA device", comm->rank);
}

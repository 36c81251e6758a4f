/* pmix.c: the unique id through the launcher's PMIx server (see lib/launch.h).
 *
 * Open MPI's mpirun and `srun --mpi=pmix` start every process with a PMIx server beside it:
 * a key-value store with a fence, which is exactly what the rendezvous needs. Rank 0 makes
 * the unique id (its process hosts the bootstrap root, as with weft_get_unique_id), puts it,
 * and all ranks fence and read it: no MASTER_ADDR, no agreed port, and the id's secret is
 * random, as under weftrun. PMIx is initialised for the exchange only and finalised right
 * after (PMIx counts its users, so an MPI library in the same process is not disturbed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/launch.h"
#include "lib/log.h"
#include "lib/status.h"

int weft__pmix_available(void) {
#ifdef WEFT_HAVE_PMIX
  return getenv("PMIX_RANK") != NULL && getenv("PMIX_NAMESPACE") != NULL;
#else
  return 0;
#endif
}

#ifndef WEFT_HAVE_PMIX
weft_status_t weft__pmix_share_id(int rank, int nranks, int timeout_ms, int have_id, weft_unique_id_t *id) {
  (void)have_id;
  return weft__error(NULL, WEFT_ERR_UNSUPPORTED, "weft was built without PMIx (Debian: libpmix-dev)");
}
#else
#include <pmix.h>

#define ID_KEY "weft.unique_id"

static weft_status_t pmix_failed(const char *call, pmix_status_t rc) {
  return weft__error(NULL, WEFT_ERR_SYSTEM, "PMIx: %s failed: %s", call, PMIx_Error_string(rc));
}

/* The job's size as PMIx knows it. */
static pmix_status_t job_size(const pmix_proc_t *me, uint32_t *size) {
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, me->nspace, PMIX_RANK_WILDCARD);
  pmix_value_t *v = NULL;
  pmix_status_t rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &v);
  if (rc == PMIX_SUCCESS && v->type == PMIX_UINT32) *size = v->data.uint32;
  else if (rc == PMIX_SUCCESS) rc = PMIX_ERR_TYPE_MISMATCH;
  if (v != NULL) PMIX_VALUE_RELEASE(v);
  return rc;
}

static weft_status_t put_id(int have_id, weft_unique_id_t *id) {
  char text[WEFT_UNIQUE_ID_STRING_BYTES];
  if (!have_id) WEFT_TRY(weft_get_unique_id(id));
  WEFT_TRY(weft_unique_id_to_string(id, text));
  pmix_value_t v;
  PMIX_VALUE_LOAD(&v, text, PMIX_STRING);
  pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, ID_KEY, &v);
  PMIX_VALUE_DESTRUCT(&v);
  if (rc != PMIX_SUCCESS) return pmix_failed("PMIx_Put of the unique id", rc);
  rc = PMIx_Commit();
  return rc == PMIX_SUCCESS ? WEFT_SUCCESS : pmix_failed("PMIx_Commit", rc);
}

static weft_status_t get_id(const pmix_proc_t *me, int timeout_ms, weft_unique_id_t *id) {
  pmix_proc_t root;
  PMIX_LOAD_PROCID(&root, me->nspace, 0);
  int secs = timeout_ms > 0 ? (timeout_ms + 999) / 1000 : 120;
  pmix_info_t info;
  PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &secs, PMIX_INT);
  pmix_value_t *v = NULL;
  pmix_status_t rc = PMIx_Get(&root, ID_KEY, &info, 1, &v);
  PMIX_INFO_DESTRUCT(&info);
  weft_status_t st = WEFT_SUCCESS;
  if (rc != PMIX_SUCCESS) st = pmix_failed("PMIx_Get of rank 0's unique id", rc);
  else if (v->type != PMIX_STRING) st = pmix_failed("PMIx_Get of rank 0's unique id", PMIX_ERR_TYPE_MISMATCH);
  else st = weft_unique_id_from_string(v->data.string, id);
  if (v != NULL) PMIX_VALUE_RELEASE(v);
  return st;
}

static weft_status_t fence(const pmix_proc_t *me, int timeout_ms) {
  pmix_proc_t all;
  PMIX_LOAD_PROCID(&all, me->nspace, PMIX_RANK_WILDCARD);
  int secs = timeout_ms > 0 ? (timeout_ms + 999) / 1000 : 120;
  bool collect = true;
  pmix_info_t info[2];
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
  pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  return rc == PMIX_SUCCESS ? WEFT_SUCCESS : pmix_failed("PMIx_Fence", rc);
}

static weft_status_t exchange(const pmix_proc_t *me, int rank, int nranks, int timeout_ms, int have_id,
                              weft_unique_id_t *id) {
  uint32_t size = 0;
  pmix_status_t rc = job_size(me, &size);
  if (rc != PMIX_SUCCESS) return pmix_failed("PMIx_Get of the job size", rc);
  if ((int)me->rank != rank || (int)size != nranks)
    return weft__error(NULL, WEFT_ERR_INVALID_USAGE,
                       "rank %d of %d by the launcher's environment, but PMIx says rank %u of %u: "
                       "a launcher inside another one? set WEFT_ROOT_ADDR or MASTER_ADDR/MASTER_PORT",
                       rank, nranks, me->rank, size);
  if (rank == 0) WEFT_TRY(put_id(have_id, id));
  WEFT_TRY(fence(me, timeout_ms));
  if (rank != 0) WEFT_TRY(get_id(me, timeout_ms, id));
  return WEFT_SUCCESS;
}

weft_status_t weft__pmix_share_id(int rank, int nranks, int timeout_ms, int have_id, weft_unique_id_t *id) {
  pmix_proc_t me;
  pmix_status_t rc = PMIx_Init(&me, NULL, 0);
  if (rc != PMIX_SUCCESS) return pmix_failed("PMIx_Init", rc);
  weft_status_t st = exchange(&me, rank, nranks, timeout_ms, have_id, id);
  PMIx_Finalize(NULL, 0);
  if (st == WEFT_SUCCESS) WEFT_INFO("rank %d: unique id exchanged through PMIx (namespace %s)", rank, me.nspace);
  return st;
}
#endif

/* comm.c: communicator creation, teardown and queries.
 *
 * Init: join the bootstrap, all-gather every rank's host identity, pid and topology summary
 * in one round, merge the summaries into the system view (comm->topo, topo/comm_topo.c:
 * also the ring order), and connect every peer with the transport that prefers it most
 * (lib/connect.c; WEFT_TRANSPORT forces one, WEFT_HOSTID fakes hosts). A failed init
 * closes the bootstrap connection without a
 * goodbye, so the root tells the other ranks at once instead of leaving them to time out. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "lib/bootstrap.h"
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/reg.h"
#include "lib/window.h"
#include "lib/select.h"
#include "lib/env.h"
#include "lib/ft.h"
#include "lib/log.h"
#include "lib/status.h"
#include "topo/topo.h"

#define DEFAULT_TIMEOUT_MS 120000
#define DEFAULT_CHUNK_BYTES (512u << 10)

static weft_status_t check_config(const weft_config_t *cfg, int *timeout_ms, int *blocking) {
  WEFT_TRY(weft__env_timeout_ms(timeout_ms));
  *blocking = (int)weft__env_long("WEFT_COMM_BLOCKING", 1);
  if (cfg == NULL) return WEFT_SUCCESS;
  if (cfg->magic != WEFT_CONFIG_MAGIC || cfg->size < sizeof(size_t) + sizeof(unsigned) + 2 * sizeof(int))
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT,
                       "weft_comm_init_rank_config: config was not initialized with WEFT_CONFIG_INITIALIZER");
  if (cfg->timeout_ms != WEFT_CONFIG_UNDEF_INT) *timeout_ms = cfg->timeout_ms;
  if (cfg->blocking != WEFT_CONFIG_UNDEF_INT) *blocking = cfg->blocking;
  if (*timeout_ms <= 0)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT,
                       "weft_comm_init_rank_config: timeout_ms must be > 0, got %d", *timeout_ms);
  if (*blocking != 0 && *blocking != 1)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT,
                       "weft_comm_init_rank_config: blocking must be 0 or 1, got %d", *blocking);
  return WEFT_SUCCESS;
}

/* What each rank sends in the one init round: its identity and its topology summary. */
typedef struct {
  weft__peer_info info;
  weft__topo_summary topo;
} init_blob;

static weft_status_t exchange_peer_info(struct weft_comm *c) {
  init_blob me;
  memset(&me, 0, sizeof(me));
  me.info.host_hash = weft__host_hash(me.info.hostname, sizeof(me.info.hostname));
  me.info.pid = (int32_t)getpid();
  me.info.rank = c->rank;
  snprintf(me.info.transport, sizeof(me.info.transport), "%s", weft__env_str("WEFT_TRANSPORT", "auto"));
  weft__topo_discover_quick(&me.topo);
  me.topo.rank = c->rank;
  me.topo.host.hash = me.info.host_hash; /* the communicator's identity (WEFT_HOSTID) */
  c->peers = calloc((size_t)c->nranks, sizeof(*c->peers));
  init_blob *all = calloc((size_t)c->nranks, sizeof(*all));
  weft__topo_summary *sums = calloc((size_t)c->nranks, sizeof(*sums));
  weft_status_t st = WEFT_SUCCESS;
  if (c->peers == NULL || all == NULL || sums == NULL)
    st = weft__error(c, WEFT_ERR_NO_MEMORY, "rank %d: init: out of memory", c->rank);
  if (st == WEFT_SUCCESS) st = weft__bootstrap_allgather(c, &me, sizeof(me), all);
  if (st == WEFT_SUCCESS) {
    for (int p = 0; p < c->nranks; p++) c->peers[p] = all[p].info, sums[p] = all[p].topo;
    st = weft__topo_comm_setup(c, sums);
  }
  free(all);
  free(sums);
  return st;
}

int weft__comm_host_nranks(const struct weft_comm *comm) {
  if (comm->topo == NULL) return 1;
  return comm->topo->hosts[comm->topo->ranks[comm->rank].host].nranks;
}

/* More ranks on this host than online cores: spinning while waiting would only burn the
 * time slice the rank we wait for needs, so waits yield at once (task.c). */
static int host_oversubscribed(const struct weft_comm *c) {
  int local = weft__comm_host_nranks(c);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 && local > cores;
}

static void free_comm(struct weft_comm *c) {
  weft__ft_stop(c);
  weft__flight_unlist(c);
  weft__flight_free(c);
  weft__window_free_all(c);
  weft__reg_free_all(c);
  free(c->scratch);
  free(c->peers);
  free(c->conns);
  weft__topo_comm_free(c);
  weft__select_comm_free(c);
  pthread_mutex_destroy(&c->err_lock);
  free(c);
}

static weft_status_t init_body(struct weft_comm *c, const weft__id_layout *id) {
  weft__log_set_rank(c->rank);
  if (c->rank == 0) /* as NCCL's "NCCL version" line: which library a log came from */
    WEFT_INFO("weft version %d.%d.%d, communicator of %d ranks", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR,
              WEFT_VERSION_PATCH, c->nranks);
  weft_status_t st = weft__bootstrap_join(c, id);
  if (st == WEFT_SUCCESS) st = exchange_peer_info(c);
  if (st == WEFT_SUCCESS) st = weft__ft_start(c); /* revoke and shrink's channel */
  if (st == WEFT_SUCCESS) c->oversubscribed = host_oversubscribed(c);
  if (st == WEFT_SUCCESS) st = weft__comm_connect(c);
  if (st != WEFT_SUCCESS) {
    weft__comm_close_transports(c);
    if (c->bootstrap_fd >= 0) close(c->bootstrap_fd); /* no goodbye: the root tells the others */
    c->bootstrap_fd = -1;
  }
  if (st == WEFT_SUCCESS) weft__flight_list(c);
  c->init_status = st;
  atomic_store(&c->init_state, st == WEFT_SUCCESS ? WEFT__INIT_DONE : WEFT__INIT_FAILED);
  return st;
}

typedef struct {
  struct weft_comm *comm;
  weft__id_layout id;
} init_job;

static void *init_thread_main(void *arg) {
  init_job *job = arg;
  init_body(job->comm, &job->id);
  free(job);
  return NULL;
}

static weft_status_t check_init_args(weft_comm_t *comm, int nranks, int rank) {
  if (comm == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_init_rank: comm is NULL");
  *comm = NULL;
  if (nranks < 1)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_init_rank: nranks is %d, must be >= 1",
                       nranks);
  if (rank < 0 || rank >= nranks)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT,
                       "weft_comm_init_rank: rank %d is outside [0, %d)", rank, nranks);
  return WEFT_SUCCESS;
}

static struct weft_comm *new_comm(int nranks, int rank, int timeout_ms, const weft__id_layout *id) {
  struct weft_comm *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->rank = rank;
  c->nranks = nranks;
  c->timeout_ms = timeout_ms;
  c->chunk_bytes = weft__env_size("WEFT_CHUNK_BYTES", DEFAULT_CHUNK_BYTES);
  if (c->chunk_bytes < 64) c->chunk_bytes = 64;
  c->check_all = weft__env_long("WEFT_CHECK", 0) != 0;
  memcpy(c->secret, id->secret, 16);
  c->bootstrap_fd = -1;
  c->bootstrap_failed_rank = -2;
  c->root_host_rank = -1;
  weft__op_lock_init(&c->lock);
  pthread_mutex_init(&c->err_lock, NULL);
  atomic_init(&c->init_state, WEFT__INIT_RUNNING);
  weft__flight_init(c);
  return c;
}

weft_status_t weft_comm_init_rank_config(weft_comm_t *comm, int nranks, weft_unique_id_t id, int rank,
                                         const weft_config_t *config) {
  WEFT_TRY(check_init_args(comm, nranks, rank));
  int timeout_ms, blocking;
  WEFT_TRY(check_config(config, &timeout_ms, &blocking));
  weft__id_layout layout;
  memcpy(&layout, id.internal, sizeof(layout));
  WEFT_TRY(weft__id_check(&layout));
  struct weft_comm *c = new_comm(nranks, rank, timeout_ms, &layout);
  if (c == NULL) return weft__error(NULL, WEFT_ERR_NO_MEMORY, "weft_comm_init_rank: out of memory");
  if (blocking) {
    weft_status_t st = init_body(c, &layout);
    if (st != WEFT_SUCCESS) {
      free_comm(c);
      return st;
    }
    *comm = c;
    return WEFT_SUCCESS;
  }
  init_job *job = malloc(sizeof(*job));
  if (job == NULL) {
    free_comm(c);
    return weft__error(NULL, WEFT_ERR_NO_MEMORY, "weft_comm_init_rank: out of memory");
  }
  job->comm = c;
  job->id = layout;
  int rc = pthread_create(&c->init_thread, NULL, init_thread_main, job);
  if (rc != 0) {
    free(job);
    free_comm(c);
    return weft__error(NULL, WEFT_ERR_SYSTEM, "weft_comm_init_rank: cannot start init thread: %s", strerror(rc));
  }
  c->init_thread_started = 1;
  *comm = c;
  return WEFT_IN_PROGRESS;
}

weft_status_t weft_comm_init_rank(weft_comm_t *comm, int nranks, weft_unique_id_t id, int rank) {
  return weft_comm_init_rank_config(comm, nranks, id, rank, NULL);
}

weft_status_t weft__comm_wait_ready(struct weft_comm *c) {
  if (atomic_load(&c->init_state) == WEFT__INIT_RUNNING && c->init_thread_started) {
    pthread_join(c->init_thread, NULL);
    c->init_thread_started = 0;
  }
  return atomic_load(&c->init_state) == WEFT__INIT_DONE ? WEFT_SUCCESS : c->init_status;
}

/* Waits until no operation of c is queued on a stream, up to the timeout. */
static int drain_pending(struct weft_comm *c) {
  uint64_t deadline = weft__deadline_after_ms(c->timeout_ms);
  while (atomic_load(&c->pending) > 0) {
    if (weft__now_ns() >= deadline) return -1;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

static weft_status_t finish(struct weft_comm *c, int goodbye) {
  weft_status_t st = WEFT_SUCCESS;
  if (weft__comm_wait_ready(c) == WEFT_SUCCESS) {
    if (drain_pending(c) != 0) {
      st = weft__error(c, WEFT_ERR_TIMEOUT, "rank %d: destroy: queued operations did not finish within %d ms; aborting",
                       c->rank, c->timeout_ms);
      atomic_store(&c->aborted, 1);
      drain_pending(c);
      goodbye = 0;
    }
    weft__op_lock_take(&c->lock);
    weft__window_free_all(c); /* before the transports they are registered with close */
    weft__reg_free_all(c);
    weft__comm_close_transports(c);
    if (goodbye) weft__bootstrap_leave(c);
    weft__op_lock_release(&c->lock);
  }
  if (c->bootstrap_fd >= 0) close(c->bootstrap_fd);
  free_comm(c);
  return st;
}

weft_status_t weft_comm_destroy(weft_comm_t comm) {
  if (comm == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_destroy: comm is NULL");
  return finish(comm, 1);
}

weft_status_t weft_comm_abort(weft_comm_t comm) {
  if (comm == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_abort: comm is NULL");
  atomic_store(&comm->aborted, 1);
  /* An operation running on another thread writes its own record as it fails. */
  if (atomic_load(&comm->init_state) == WEFT__INIT_DONE && weft__op_lock_try(&comm->lock)) {
    weft__flight_dump(comm, "abort", NULL);
    weft__op_lock_release(&comm->lock);
  }
  /* No goodbye: the root then tells the other ranks this one is gone. */
  finish(comm, 0);
  return WEFT_SUCCESS;
}

weft_status_t weft_comm_count(const weft_comm_t comm, int *count) {
  if (comm == NULL || count == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_count: NULL argument");
  *count = comm->nranks;
  return WEFT_SUCCESS;
}

weft_status_t weft_comm_user_rank(const weft_comm_t comm, int *rank) {
  if (comm == NULL || rank == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_user_rank: NULL argument");
  *rank = comm->rank;
  return WEFT_SUCCESS;
}

weft_status_t weft_comm_get_async_error(weft_comm_t comm, weft_status_t *async_error) {
  if (comm == NULL || async_error == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_get_async_error: NULL argument");
  int state = atomic_load(&comm->init_state);
  if (state == WEFT__INIT_RUNNING) *async_error = WEFT_IN_PROGRESS;
  else if (state == WEFT__INIT_FAILED) *async_error = comm->init_status;
  else *async_error = (weft_status_t)atomic_load(&comm->async_error);
  return WEFT_SUCCESS;
}

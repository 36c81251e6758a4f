/* comm_shrink.c: weft_comm_shrink (issue 22): a new communicator of the ranks that remain,
 * as NCCL 2.27's ncclCommShrink (an explicit exclude list) and MPI ULFM's MPI_Comm_shrink
 * (WEFT_SHRINK_FAILED: whatever ranks have failed, agreed on by the survivors, agree.c).
 *
 * No unique id from the user: the lowest rank that remains (the leader) creates one, so its
 * process hosts the new bootstrap root, and sends it over the fault-tolerance channel (ft.h),
 * authenticated with the old communicator's secret; neither the old communicator's data
 * connections (maybe broken mid-message) nor its bootstrap root (maybe in the dead rank's
 * process) are used. New ranks follow the old ranks' order.
 *
 * Every build ends in a commit (an agreement over the old communicator): each member's init
 * ends on its own, so a rank that dies while the new communicator is built can leave some
 * members holding it (they finished their connections with it) and the others an error.
 * The new communicator is kept only when every member built it and no rank was lost
 * meanwhile; otherwise every member drops it alike, and in WEFT_SHRINK_FAILED mode they
 * agree again without the lost, a few times at most (as ULFM's MPI_Comm_shrink ends in an
 * agreement on the result). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/ft.h"
#include "lib/log.h"
#include "lib/status.h"

#define SEND_DEADLINE_MS 1000
#define PROBE_EVERY_NS 100000000ull
#define PROBE_WAIT_MS 200
#define MAX_ATTEMPTS 4 /* agreement + build; each lost attempt is a rank lost meanwhile */

static int is_leader_of(const uint8_t *mask, int nranks, int rank) {
  for (int p = 0; p < nranks; p++)
    if (!weft__mask_has(mask, p)) return p == rank;
  return 0;
}

/* The leader's id (or its failure to make one: an empty NEWID), sent to the others. */
static weft_status_t lead(struct weft_comm *comm, uint32_t epoch, const uint8_t *mask, weft_unique_id_t *id) {
  weft_status_t st = weft_get_unique_id(id);
  int *to = malloc(sizeof(int) * (size_t)comm->nranks), n = 0;
  if (to == NULL) return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: shrink: out of memory", comm->rank);
  for (int p = 0; p < comm->nranks; p++)
    if (p != comm->rank && !weft__mask_has(mask, p)) to[n++] = p;
  weft__ft_send(comm, to, n, WEFT__FT_NEWID, epoch, 0, id, st == WEFT_SUCCESS ? (uint32_t)sizeof(*id) : 0, NULL,
                weft__deadline_after_ms(SEND_DEADLINE_MS));
  free(to);
  return st;
}

/* Waits for the leader's id: bounded by the timeout, and ended early by the leader's death. */
static weft_status_t follow(struct weft_comm *comm, uint32_t epoch, int leader, weft_unique_id_t *id) {
  uint64_t start = weft__now_ns(), last_probe = start;
  for (;;) {
    weft__ft_msg *m = weft__ft_take(comm, WEFT__FT_NEWID, epoch, ~0u, leader, 20);
    if (m != NULL) {
      int ok = m->len == sizeof(*id);
      if (ok) memcpy(id, m->payload, sizeof(*id));
      free(m);
      return ok ? WEFT_SUCCESS
                : weft__error(comm, WEFT_ERR_REMOTE, "rank %d: shrink: the leader, rank %d, could not create "
                              "the new communicator's unique id (its log says why)", comm->rank, leader);
    }
    uint64_t now = weft__now_ns();
    if (now - last_probe > PROBE_EVERY_NS) {
      last_probe = now;
      if (weft__ft_probe(comm, leader, PROBE_WAIT_MS) == 0)
        return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: shrink: peer %d (the leader, which creates the "
                           "new unique id) failed before sending it", comm->rank, leader);
    }
    if (now - start > (uint64_t)comm->timeout_ms * 1000000ull)
      return weft__error(comm, WEFT_ERR_TIMEOUT, "rank %d: shrink: no unique id from peer %d (the leader) "
                         "within %d ms; is it stuck or not calling weft_comm_shrink?", comm->rank, leader,
                         comm->timeout_ms);
  }
}

/* Waits for the new communicator's init, watching its members over the old channel. A
 * member that died before it joined the new root would leave the others waiting for it
 * until the deadline (the root only hears of ranks that connected); so when a probe finds
 * one gone, this rank drops its connection to the new root, which tells every member at
 * once, and every survivor's init fails alike (then they agree again). */
static weft_status_t await_init(struct weft_comm *comm, const uint8_t *mask, struct weft_comm *next) {
  uint64_t last_probe = weft__now_ns();
  int dropped = 0;
  weft_status_t st = WEFT_IN_PROGRESS;
  while (weft_comm_get_async_error(next, &st) == WEFT_SUCCESS && st == WEFT_IN_PROGRESS) {
    struct timespec nap = {0, 2000000};
    nanosleep(&nap, NULL);
    uint64_t now = weft__now_ns();
    /* Once this rank has joined (peers are allocated right after the root's READY), every
     * member has, and the root itself reports a death; one that dies later is the commit's. */
    if (dropped || now - last_probe < PROBE_EVERY_NS || __atomic_load_n(&next->peers, __ATOMIC_ACQUIRE) != NULL)
      continue;
    last_probe = now;
    for (int p = 0; p < comm->nranks && !dropped; p++) {
      if (p == comm->rank || weft__mask_has(mask, p) || weft__ft_probe(comm, p, PROBE_WAIT_MS) != 0) continue;
      WEFT_WARN("rank %d: shrink: rank %d is gone while the new communicator is being built; leaving its "
                "bootstrap so every member fails alike", comm->rank, p);
      int fd = __atomic_load_n(&next->bootstrap_fd, __ATOMIC_RELAXED); /* set by the init thread */
      if (fd >= 0) shutdown(fd, SHUT_RDWR), dropped = 1;
    }
  }
  return weft__comm_wait_ready(next); /* joins the init thread; its status */
}

/* The new communicator of the ranks outside mask. */
static weft_status_t build(struct weft_comm *comm, uint32_t epoch, const uint8_t *mask, const weft_config_t *cfg,
                           weft_comm_t *newcomm) {
  int leader = -1, newrank = 0, size = 0;
  for (int p = 0; p < comm->nranks; p++) {
    if (weft__mask_has(mask, p)) continue;
    if (leader < 0) leader = p;
    if (p < comm->rank) newrank++;
    size++;
  }
  weft_unique_id_t id;
  weft_status_t st = is_leader_of(mask, comm->nranks, comm->rank) ? lead(comm, epoch, mask, &id)
                                                                   : follow(comm, epoch, leader, &id);
  if (st != WEFT_SUCCESS) return st;
  WEFT_INFO("rank %d: shrink: becoming rank %d of %d (leader: old rank %d)", comm->rank, newrank, size, leader);
  weft_config_t background = *cfg;
  background.blocking = 0;
  st = weft_comm_init_rank_config(newcomm, size, id, newrank, &background);
  if (st == WEFT_IN_PROGRESS) st = await_init(comm, mask, *newcomm);
  if (st != WEFT_SUCCESS && *newcomm != NULL) {
    /* The init ran on a thread of its own, which logged its error: carry the message to
     * this thread, saying that its rank numbers are the new communicator's. */
    weft__error_quiet(1);
    weft__error(comm, st, "rank %d: shrink: building the new communicator (as its rank %d of %d): %s", comm->rank,
                newrank, size, weft_get_last_error(*newcomm));
    weft__error_quiet(0);
    weft_comm_abort(*newcomm);
    *newcomm = NULL;
  }
  return st;
}

/* The commit: the members agree again on the failed ranks, and on whether any member's
 * build failed (the agreement's flags). built: this rank's build status. Keeps *newcomm
 * (WEFT_SUCCESS) only when every member built it and no rank was lost meanwhile; else drops
 * it (NULL) and returns this rank's own build error, or WEFT_ERR_REMOTE naming what another
 * member saw. *again: 1 when the members may agree again (a rank was lost: mask now holds
 * it, flags cleared), 0 when they keep it or give up alike (a timeout would only repeat). */
static weft_status_t commit(struct weft_comm *comm, weft_status_t built, uint8_t *mask, weft_comm_t *newcomm,
                            int *again) {
  size_t mb = weft__agree_mask_bytes(comm->nranks);
  int failed_bit = WEFT__AGREE_BUILD_FAILED(comm->nranks), gave_up_bit = WEFT__AGREE_BUILD_GAVE_UP(comm->nranks);
  uint8_t *seen = malloc(mb);
  char why[256] = ""; /* this rank's own build error, for a message naming the lost rank */
  if (built != WEFT_SUCCESS) snprintf(why, sizeof why, " (here: %s)", weft__thread_last_error());
  weft_status_t st = seen != NULL ? WEFT_SUCCESS
                                  : weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: shrink: out of memory", comm->rank);
  *again = 0;
  if (st == WEFT_SUCCESS) {
    memcpy(seen, mask, mb);
    if (built != WEFT_SUCCESS) weft__mask_set(seen, built == WEFT_ERR_REMOTE ? failed_bit : gave_up_bit);
    st = weft__agree_failed(comm, weft__ft_next_epoch(comm), seen);
  }
  int lost = -1;
  for (int p = 0; st == WEFT_SUCCESS && p < comm->nranks && lost < 0; p++)
    if (weft__mask_has(seen, p) && !weft__mask_has(mask, p)) lost = p;
  if (st == WEFT_SUCCESS && lost < 0 && built == WEFT_SUCCESS && !weft__mask_has(seen, failed_bit) &&
      !weft__mask_has(seen, gave_up_bit)) {
    free(seen);
    return WEFT_SUCCESS;
  }
  if (*newcomm != NULL) {
    weft_comm_abort(*newcomm);
    *newcomm = NULL;
  }
  if (st == WEFT_SUCCESS) {
    *again = !weft__mask_has(seen, gave_up_bit);
    if (lost >= 0)
      st = weft__error(comm, WEFT_ERR_REMOTE, "rank %d: shrink: rank %d failed while the new communicator "
                       "was built; every member drops it%s", comm->rank, lost, why);
    else if (built == WEFT_SUCCESS)
      st = weft__error(comm, WEFT_ERR_REMOTE, "rank %d: shrink: another member could not build the new "
                       "communicator (its log says why); every member drops it", comm->rank);
    else
      st = built; /* its message stays this thread's last error (build carried it here) */
    memcpy(mask, seen, mb);
    weft__mask_clear(mask, failed_bit);
    weft__mask_clear(mask, gave_up_bit);
  }
  free(seen);
  return st;
}

static weft_status_t check_args(weft_comm_t comm, const int *exclude, int n, weft_comm_t *newcomm,
                                const weft_config_t *config) {
  if (comm == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_shrink: comm is NULL");
  if (newcomm == NULL)
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "rank %d: weft_comm_shrink: newcomm is NULL", comm->rank);
  *newcomm = NULL;
  if (n < WEFT_SHRINK_FAILED || (n > 0 && exclude == NULL))
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "rank %d: weft_comm_shrink: exclude list NULL or "
                       "count %d (must be >= 0, or WEFT_SHRINK_FAILED)", comm->rank, n);
  for (int i = 0; i < n; i++) {
    if (exclude[i] < 0 || exclude[i] >= comm->nranks)
      return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "rank %d: weft_comm_shrink: excluded rank %d is "
                         "outside [0, %d)", comm->rank, exclude[i], comm->nranks);
    if (exclude[i] == comm->rank)
      return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "rank %d: weft_comm_shrink: this rank is in the "
                         "exclude list: an excluded rank must not call shrink", comm->rank);
  }
  if (config != NULL && config->magic != WEFT_CONFIG_MAGIC)
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT, "rank %d: weft_comm_shrink: config was not "
                       "initialized with WEFT_CONFIG_INITIALIZER", comm->rank);
  return WEFT_SUCCESS;
}

weft_status_t weft_comm_shrink(weft_comm_t comm, const int *exclude_ranks, int n, weft_comm_t *newcomm,
                               const weft_config_t *config) {
  WEFT_TRY(check_args(comm, exclude_ranks, n, newcomm, config));
  WEFT_TRY(weft__comm_wait_ready(comm));
  if (comm->ft == NULL)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: weft_comm_shrink: the communicator has no "
                       "fault-tolerance channel (its init failed)", comm->rank);
  weft_config_t cfg = WEFT_CONFIG_INITIALIZER;
  if (config != NULL) cfg = *config;
  if (cfg.timeout_ms == WEFT_CONFIG_UNDEF_INT) cfg.timeout_ms = comm->timeout_ms;
  uint8_t *mask = calloc(weft__agree_mask_bytes(comm->nranks), 1);
  if (mask == NULL) return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: weft_comm_shrink: out of memory", comm->rank);
  weft_status_t st;
  int again = 0;
  if (n >= 0) { /* NCCL's shrink: the caller names the ranks; no agreement on them */
    for (int i = 0; i < n; i++) weft__mask_set(mask, exclude_ranks[i]);
    st = build(comm, weft__ft_next_epoch(comm), mask, &cfg, newcomm);
    st = commit(comm, st, mask, newcomm, &again);
  } else {
    /* Calls still blocked on comm (this rank's other threads, the other ranks) must end,
     * and the survivors must come here: revoke it everywhere. */
    weft__comm_mark_revoked(comm, comm->rank, 1);
    st = WEFT_ERR_INTERNAL;
    for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      uint32_t epoch = weft__ft_next_epoch(comm);
      st = weft__agree_failed(comm, epoch, mask);
      if (st != WEFT_SUCCESS) break;
      st = build(comm, epoch, mask, &cfg, newcomm);
      st = commit(comm, st, mask, newcomm, &again);
      if (!again) break;
      WEFT_WARN("rank %d: shrink: the new communicator was dropped (%s); agreeing again", comm->rank,
                weft__thread_last_error());
    }
  }
  free(mask);
  return st;
}

/* comm_revoke.c: weft_comm_revoke (issue 22), as NCCL 2.27's ncclCommRevoke and MPI ULFM's
 * MPI_Comm_revoke: any rank marks a communicator unusable, and every rank's calls on it, in
 * flight or later, return WEFT_ERR_REVOKED.
 *
 * How it reaches the other ranks: over the fault-tolerance channel (ft.h), straight from rank
 * to rank, so it works when the bootstrap root's process is the one that died. Every rank
 * relays the first REVOKE it receives to all others, so a revoker that dies after telling
 * one rank still reaches everyone (as ULFM's reliable broadcast of revoke).
 * How a blocked call wakes: the flag is an atomic that lib/task.c's drive loop reads on
 * every pass, as it reads abort; a waiting rank sleeps at most ~1 ms at a time (the shm
 * doorbell's bound, the socket poll's 1 ms), so it sees the flag within a few ms. */
#include <stdio.h>
#include <stdlib.h>
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/ft.h"
#include "lib/log.h"
#include "lib/status.h"

#define BROADCAST_DEADLINE_MS 1000 /* every live peer's kernel accepts at once; the rest relay */

void weft__comm_mark_revoked(struct weft_comm *comm, int by, int broadcast) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&comm->revoked, &expected, by + 1)) return; /* already */
  if (by != comm->rank) WEFT_INFO("rank %d: rank %d revoked the communicator", comm->rank, by);
  if (!broadcast || comm->ft == NULL || comm->nranks < 2) return;
  int *to = malloc(sizeof(int) * (size_t)comm->nranks), n = 0;
  if (to == NULL) return;
  for (int p = 0; p < comm->nranks; p++)
    if (p != comm->rank && p != by) to[n++] = p;
  /* round carries the revoker, so a relayed notice still names who revoked */
  weft__ft_send(comm, to, n, WEFT__FT_REVOKE, 0, (uint32_t)by, NULL, 0, NULL, weft__deadline_after_ms(BROADCAST_DEADLINE_MS));
  free(to);
}

weft_status_t weft__comm_revoked_error(struct weft_comm *comm, const char *what) {
  int by = atomic_load(&comm->revoked) - 1;
  const char *sep = what != NULL ? ": " : "";
  if (what == NULL) what = "";
  if (by == comm->rank)
    return weft__error(comm, WEFT_ERR_REVOKED, "rank %d: %s%sthis rank revoked the communicator", comm->rank, what, sep);
  return weft__error(comm, WEFT_ERR_REVOKED, "rank %d: %s%sthe communicator was revoked by rank %d", comm->rank,
                     what, sep, by);
}

weft_status_t weft_comm_revoke(weft_comm_t comm) {
  if (comm == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_revoke: comm is NULL");
  weft_status_t st = weft__comm_wait_ready(comm);
  if (st != WEFT_SUCCESS) return st;
  weft__comm_mark_revoked(comm, comm->rank, 1);
  return WEFT_SUCCESS;
}

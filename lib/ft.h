/* ft.h: the fault-tolerance side channel of a communicator, for revoke, agreement and
 * shrink (issue 22).
 *
 * Why a channel of its own: after a failure the data connections (shm FIFOs, sockets) may
 * hold half a message and the communicator is marked broken, and the bootstrap root may be
 * the rank that died. So every rank listens on a TCP port of its own (the interface the
 * bootstrap would pick), whose address all ranks learn in one bootstrap round at init, and a
 * thread per communicator (the watcher) accepts one message per connection. Each message
 * carries the communicator's secret, checked before anything in it is believed. A connect
 * refused means the rank's process is gone (the kernel closed its listener): that is the
 * failure detector the agreement uses. Messages: REVOKE (marks the communicator revoked,
 * relayed once by every receiver so a revoker that dies halfway still reaches everyone),
 * AGREE and DECIDED (lib/agree.c), NEWID (the new communicator's unique id, from the
 * shrink's leader), PING (a liveness probe; only the connect matters), SYNC (weft__ft_sync). */
#ifndef WEFT_FT_H
#define WEFT_FT_H
#include <stddef.h>
#include <stdint.h>
#include "weft.h"

struct weft_comm;

enum {
  WEFT__FT_REVOKE = 1,
  WEFT__FT_AGREE = 2,   /* round's proposal: a bitmask of failed ranks */
  WEFT__FT_DECIDED = 3, /* the decided bitmask: sent by every rank that decides or adopts it,
                           and the reply to a late AGREE */
  WEFT__FT_NEWID = 4,   /* payload: weft_unique_id_t */
  WEFT__FT_PING = 5,
  WEFT__FT_SYNC = 6,    /* to this rank's own listener; round: weft__ft_sync's number */
};

#define WEFT__FT_MAX_PAYLOAD 4096u /* a bitmask of 32768 ranks, or an id */

/* A received, authenticated message, kept in the communicator's inbox. */
typedef struct weft__ft_msg {
  uint32_t type;
  int32_t from;
  uint32_t epoch, round;
  uint32_t len;
  struct weft__ft_msg *next;
  unsigned char payload[];
} weft__ft_msg;

/* Starts comm's listener and watcher and learns every rank's listener (one bootstrap
 * all-gather; collective, at init). Errors: WEFT_ERR_SYSTEM, WEFT_ERR_NO_MEMORY, the
 * bootstrap's. */
weft_status_t weft__ft_start(struct weft_comm *comm);
/* Stops the watcher and frees the channel (safe when never started). */
void weft__ft_stop(struct weft_comm *comm);

/* Sends one message to each rank of to[0..n) at once, waiting at most until deadline_ns.
 * result[i] (may be NULL): 1 sent, 0 that rank's process is gone (refused or reset),
 * -1 no answer by the deadline. */
void weft__ft_send(struct weft_comm *comm, const int *to, int n, uint32_t type, uint32_t epoch,
                   uint32_t round, const void *payload, uint32_t len, int *result,
                   uint64_t deadline_ns);
/* 1 when rank's listener accepts a connection (its process is alive), 0 when gone, -1 when
 * it did not answer within wait_ms. */
int weft__ft_probe(struct weft_comm *comm, int rank, int wait_ms);

/* Waits until the watcher has handled every connection that reached this rank's listener
 * before the call (up to wait_ms): it connects to its own listener and waits for that
 * message, which the watcher takes after every connection queued before it (the kernel's
 * accept queue is first in, first out). 1 when done, 0 when wait_ms passed first. The
 * agreement calls it on seeing a death: a rank that decided, told this one (DECIDED) and
 * then left refuses connections as a dead one does, and its DECIDED, sent before it left,
 * must be read before the refusal is believed. Thread safe. */
int weft__ft_sync(struct weft_comm *comm, int wait_ms);

/* Takes (unlinks) the first inbox message matching type, epoch and round (round ~0u: any)
 * and from (-1: any), waiting up to wait_ms for one; NULL when none came. Free it with
 * free(). */
weft__ft_msg *weft__ft_take(struct weft_comm *comm, uint32_t type, uint32_t epoch, uint32_t round,
                            int from, int wait_ms);
/* Records the agreement's decision for epoch, so the watcher answers a survivor still in
 * that agreement (its late AGREE) with DECIDED, and drops the DECIDEDs of that epoch still
 * in the inbox (and later ones: every rank relays the decision, lib/agree.c). mask:
 * weft__agree_mask_bytes(nranks) bytes. */
void weft__ft_set_decided(struct weft_comm *comm, uint32_t epoch, const uint8_t *mask);
/* The next shrink epoch of comm (every caller of shrink counts the same). */
uint32_t weft__ft_next_epoch(struct weft_comm *comm);

/* Revoking (lib/comm_revoke.c). Marks comm revoked; when broadcast, tells every other rank
 * (and by relay the rest). by: the rank that revoked (for the message). */
void weft__comm_mark_revoked(struct weft_comm *comm, int by, int broadcast);
/* The error every call on a revoked communicator returns, naming who revoked it; what (may
 * be NULL: lib/task.c adds the operation itself) prefixes the message. */
weft_status_t weft__comm_revoked_error(struct weft_comm *comm, const char *what);

/* The agreement (lib/agree.c): survivors agree on the set of failed ranks. mask (in and
 * out, weft__agree_mask_bytes(nranks) bytes): the ranks known failed on entry, and the
 * flags this rank raises; on success the set every survivor decided, with the union of
 * every survivor's flags. Errors: WEFT_ERR_REMOTE (the survivors excluded this rank),
 * WEFT_ERR_TIMEOUT never: a rank that does not answer in time is counted as failed. */
weft_status_t weft__agree_failed(struct weft_comm *comm, uint32_t epoch, uint8_t *mask);

/* An agreement's mask: a bit per rank (set: failed), then two flags that survivors raise
 * and that the agreement ORs like the ranks' bits: comm_shrink.c's commit of a new
 * communicator uses them to learn whether any survivor's build of it failed. */
#define WEFT__AGREE_BUILD_FAILED(nranks) (nranks)       /* retry: a rank was lost meanwhile */
#define WEFT__AGREE_BUILD_GAVE_UP(nranks) ((nranks) + 1) /* no retry: a timeout, no memory */
static inline size_t weft__agree_mask_bytes(int nranks) { return ((size_t)nranks + 2 + 7) / 8; }

static inline int weft__mask_has(const uint8_t *m, int r) { return (m[r >> 3] >> (r & 7)) & 1; }
static inline void weft__mask_set(uint8_t *m, int r) { m[r >> 3] |= (uint8_t)(1u << (r & 7)); }
static inline void weft__mask_clear(uint8_t *m, int r) { m[r >> 3] &= (uint8_t)~(1u << (r & 7)); }
#endif

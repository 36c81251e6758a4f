/* bootstrap.h: rendezvous through the root named by the unique id.
 *
 * The root is a thread (of the process that made the id) with one TCP connection per rank,
 * a star as in Gloo's TCP store. A rank joins by proving the id's 128-bit secret and
 * stating (rank, nranks); when all have joined, the root serves rounds: every rank sends one
 * blob, every rank receives all blobs in rank order (an all-gather; a barrier is an empty
 * one). A connection that closes without a goodbye is a failed rank: the root tells all
 * others, so a rank blocked on any peer learns who died. Cost: O(nranks) messages per round
 * at the root, which is fine for the handful of rounds init and destroy need. */
#ifndef WEFT_BOOTSTRAP_H
#define WEFT_BOOTSTRAP_H
#include <stdint.h>
#include "weft.h"
#include "lib/sockutil.h"

struct weft_comm;

/* The layout behind weft_unique_id_t.internal. */
typedef struct {
  uint32_t magic;       /* WEFT__ID_MAGIC */
  uint16_t version;     /* WEFT__ID_VERSION */
  uint16_t family;      /* AF_INET or AF_INET6 of the root */
  uint16_t port;        /* the root's port, host order */
  uint16_t reserved;
  uint32_t scope_id;    /* IPv6 scope */
  uint8_t addr[16];     /* the root's address (4 bytes used for IPv4) */
  uint8_t secret[16];   /* 128-bit random secret every rank must present */
} weft__id_layout;

/* Converting between the id's compact address and a socket address. */
void weft__id_set_root(weft__id_layout *id, const weft__sockaddr *root);
void weft__id_get_root(const weft__id_layout *id, weft__sockaddr *root);
/* Checks magic and version; WEFT_ERR_INVALID_ARGUMENT (with a message) otherwise. */
weft_status_t weft__id_check(const weft__id_layout *id);

#define WEFT__ID_MAGIC 0x54464557u /* "WEFT" little-endian */
#define WEFT__ID_VERSION 1

/* Starts a root thread listening on *addr (port 0 picks one; updated to the bound address)
 * that accepts ranks presenting secret. join_timeout_ms bounds how long it waits for the
 * first and then all ranks to join. Errors: WEFT_ERR_SYSTEM. Thread-safe. */
weft_status_t weft__bootstrap_root_start(weft__sockaddr *addr, const uint8_t secret[16],
                                         int join_timeout_ms);

/* Joins comm->rank of comm->nranks to the root of id (retrying until the root listens)
 * and waits for all ranks. Sets comm->bootstrap_fd. Errors: WEFT_ERR_AUTH (secret,
 * nranks or rank rejected), WEFT_ERR_TIMEOUT (the message names the missing ranks),
 * WEFT_ERR_REMOTE, WEFT_ERR_SYSTEM. */
weft_status_t weft__bootstrap_join(struct weft_comm *comm, const weft__id_layout *id);

/* All-gather through the root: all[r * bytes ..] = rank r's mine, for every r. Every rank
 * calls it with the same bytes. Errors: WEFT_ERR_REMOTE (a rank failed), WEFT_ERR_TIMEOUT.
 * Caller holds comm->lock or runs init. */
weft_status_t weft__bootstrap_allgather(struct weft_comm *comm, const void *mine, size_t bytes,
                                        void *all);
weft_status_t weft__bootstrap_barrier(struct weft_comm *comm);

/* Non-blocking: has the root reported a failed rank (or gone away itself)? WEFT_SUCCESS if
 * not; else WEFT_ERR_REMOTE with *failed_rank set (-1 for the root) and *why a static
 * text owned by comm. Once reported, stays reported. When the root is gone,
 * comm->root_host_rank (>= 0) is the rank that died with it, unless that rank had left
 * cleanly before. Caller holds comm->lock. */
weft_status_t weft__bootstrap_check_failure(struct weft_comm *comm, int *failed_rank,
                                            const char **why);

/* Says goodbye to the root and closes the connection. */
void weft__bootstrap_leave(struct weft_comm *comm);
#endif

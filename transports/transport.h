/* transport.h: the one small interface every transport implements (shm, socket; later CUDA
 * P2P and RDMA). A transport connects this rank to a set of peers, then moves the head
 * request of a connection's send or receive queue as far as it can without blocking. */
#ifndef WEFT_TRANSPORT_H
#define WEFT_TRANSPORT_H
#include <poll.h>
#include <stdint.h>
#include "weft.h"
#include "lib/req.h"

struct weft_comm;

typedef struct weft__transport {
  const char *name; /* "shm", "socket" */
  /* Connects this rank to peers[0..npeers). Collective: every rank calls it (npeers may be
   * 0) after the bootstrap, in the same transport order, so it may use
   * weft__bootstrap_allgather. Sets comm->conns[p].tr and .priv for each peer p. Every wait
   * ends at comm's timeout. Errors name the peer. */
  weft_status_t (*setup)(struct weft_comm *comm, const int *peers, int npeers);
  /* Moves bytes of r (the head of c's send queue); sets r->done, r->complete, and
   * *progressed = 1 when anything moved. Never blocks. Errors (peer gone, size mismatch)
   * are raised with weft__error naming comm's rank and c->peer. */
  weft_status_t (*send_progress)(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                 int *progressed);
  /* The same for the head of c's receive queue; data reaches r through weft__req_deliver. */
  weft_status_t (*recv_progress)(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                 int *progressed);
  /* Optional: fills up to max pollfds a waiting rank may sleep on for c (socket fds); returns
   * how many. NULL when the transport has nothing to poll (shm). */
  int (*poll_fds)(weft__conn *c, struct pollfd *fds, int max);
  /* Frees all of comm's state of this transport. Safe after a failed or partial setup. */
  void (*teardown)(struct weft_comm *comm);
} weft__transport;

extern const weft__transport weft__transport_shm;

/* Sleeping until a shm peer rings this rank's doorbell (transports/shm/shm_doorbell.h).
 * The waiter calls begin (0: no shm peers, nothing to sleep on), looks once more for work,
 * then sleeps at most max_ns unless something came, and always calls end. A peer rings
 * after it published data, a freed slot or an LL credit, only while the waiter sleeps. */
int weft__shm_sleep_begin(struct weft_comm *comm, uint32_t *bell);
void weft__shm_sleep(struct weft_comm *comm, uint32_t bell, uint64_t max_ns);
void weft__shm_sleep_end(struct weft_comm *comm);
extern const weft__transport weft__transport_socket;
#endif

/* task.h: one operation (a collective, or a group of sends and receives) as a non-blocking
 * state machine. An algorithm posts requests in start() and advances in progress(), which
 * returns WEFT_IN_PROGRESS until the operation is complete. The blocking call is start()
 * plus weft__task_wait(); a stream's progress thread runs the same two. */
#ifndef WEFT_TASK_H
#define WEFT_TASK_H
#include <stddef.h>
#include <stdint.h>
#include "weft.h"
#include "lib/req.h"

struct weft_comm;

typedef enum {
  WEFT__COLL_ALL_REDUCE,
  WEFT__COLL_BROADCAST,
  WEFT__COLL_REDUCE,
  WEFT__COLL_ALL_GATHER,
  WEFT__COLL_REDUCE_SCATTER,
  WEFT__COLL_ALL_TO_ALL,
  WEFT__COLL_ALL_TO_ALLV,
  WEFT__COLL_GATHER,
  WEFT__COLL_SCATTER,
  WEFT__COLL_BARRIER,
  WEFT__COLL_SEND,
  WEFT__COLL_RECV,
  WEFT__COLL_P2P_GROUP, /* the sends and receives of one group, progressed together */
  WEFT__NUM_COLLS
} weft__coll_t;

/* Accessors of t->vcounts (all_to_allv). */
#define WEFT__V_SENDCOUNTS(t) ((t)->vcounts)
#define WEFT__V_SDISPLS(t) ((t)->vcounts + (t)->comm->nranks)
#define WEFT__V_RECVCOUNTS(t) ((t)->vcounts + 2 * (size_t)(t)->comm->nranks)
#define WEFT__V_RDISPLS(t) ((t)->vcounts + 3 * (size_t)(t)->comm->nranks)

/* "all_reduce", "broadcast", ... */
const char *weft__coll_name(weft__coll_t coll);

struct weft__task;
/* An algorithm: its row of the registry (lib/algo.h). */
typedef struct weft__algo weft__algo;

struct weft__mem_space;

/* One send or receive of a group (kept as a list on the group's task). */
typedef struct weft__p2p_op {
  int is_send;
  int peer;
  void *buf; /* send: const data; recv: destination */
  size_t bytes;
  const struct weft__mem_space *mem; /* buf's memory space */
} weft__p2p_op;

enum { WEFT__TASK_STATE_INLINE = 512 }; /* bytes of state kept inside the task */
enum { WEFT__TASK_P2P_INLINE = 4 };     /* a group's ops kept inside the task */

typedef struct weft__task {
  struct weft_comm *comm;
  weft__coll_t coll;
  uint64_t seq;             /* the operation's sequence number on comm, from 1 */
  const void *sendbuf;
  void *recvbuf;
  size_t count;             /* elements, as the caller gave it */
  weft_datatype_t dtype;
  weft_redop_t op;
  /* The memory space of sendbuf and recvbuf (mem/space.h): the algorithm reads and writes
   * them only through it. Host unless a buffer lies in another space. */
  const struct weft__mem_space *mem;
  int root;                 /* rooted collectives; -1 otherwise */
  int peer;                 /* send / recv; -1 otherwise */
  weft__p2p_op *p2p;        /* WEFT__COLL_P2P_GROUP: its ops, p2p_inline or malloc'd */
  int np2p;
  /* WEFT__COLL_ALL_TO_ALLV: the caller's sendcounts, sdispls, recvcounts, rdispls (nranks
   * entries each, in elements, in that order) copied into one malloc'd block owned by the
   * task, so the caller may reuse its arrays as soon as the call returns. */
  size_t *vcounts;
  const weft__algo *algo;
  void *state;              /* the algorithm's own state: state_inline or malloc'd */
  struct weft__task *next;  /* in a stream's or group's queue */
  void *device_call;        /* lib/stream_cuda.c's state of a call on a CUDA stream, or NULL */
  /* Small states (every algorithm's at a few hundred bytes and below, scratch included)
   * live here, so a blocking small call, whose task is on the caller's stack, touches the
   * heap not at all: two malloc/free pairs were ~6% of a 0.3 us call (perf, broadcast 8 B). */
  _Alignas(64) unsigned char state_inline[WEFT__TASK_STATE_INLINE];
  /* A group of up to this many sends and receives (a sendrecv, a halo exchange with two
   * neighbours) keeps its ops here: a group enqueued on a stream is run and released by the
   * stream's thread, and a malloc'd list freed there went back to the caller's heap arena
   * under its lock (4 ranks on 2 cores, 8-byte sendrecv: free's consolidation ~5% of samples). */
  weft__p2p_op p2p_inline[WEFT__TASK_P2P_INLINE];
} weft__task;

/* A new task for comm (seq assigned when it is launched). Errors: WEFT_ERR_NO_MEMORY. */
weft_status_t weft__task_new(struct weft_comm *comm, weft__coll_t coll, weft__task **out);
/* Fills a task the caller owns (on its stack): no allocation, cannot fail. */
void weft__task_init(weft__task *t, struct weft_comm *comm, weft__coll_t coll);
/* Frees what t owns (a heap state, p2p ops, v-counts), not t itself. */
void weft__task_release(weft__task *t);
/* weft__task_release, then frees t (from weft__task_new). NULL is fine. */
void weft__task_free(weft__task *t);

/* Runs t to completion on the calling thread: takes comm->lock, assigns the sequence number,
 * selects the algorithm, starts it and progresses until done or an error. Every wait is
 * bounded: if nothing moves for the communicator's timeout the task fails with
 * WEFT_ERR_TIMEOUT naming the peer it waits for. Spins briefly, then yields, then sleeps,
 * so more ranks than cores make progress. */
weft_status_t weft__task_run(weft__task *t);

/* Progresses t (started: its requests posted) until t->algo->progress says it is done, an
 * error, or the timeout (WEFT_ERR_TIMEOUT naming the peer waited for); the waits of
 * weft__task_run. Caller holds comm->lock. */
weft_status_t weft__task_drive(weft__task *t);

/* With more ranks than cores on the host, whether a rank with nothing to move should spin
 * rather than yield its CPU: 1 when it waits only for receives of at most
 * WEFT__OVERSUB_SPIN_BYTES (1 KiB; no send pending), each from a peer whose connection has
 * other_cpus set (bound to CPUs this rank is not) and whose transport says it holds its CPU
 * now (peer_on_cpu); 0 otherwise, when nothing is pending, and for a broadcast (coll: a
 * stream from the root, where yielding lets the rank sharing our CPU forward what arrived;
 * measured no faster with spinning). The waits of weft__task_drive spin so for at most 200
 * idle looks, then yield. Why: such a message is a few hundred nanoseconds of the peer's
 * work away, less than the context switch a yield costs (~0.8 us on the 2-core VM), and the
 * rank that would get our CPU is often itself waiting for a peer that is not running. A
 * pending send waits for a receiver to drain its FIFO, and a large message for the peer's
 * copies: the rank sharing our CPU may have work of its own then. Caller holds comm->lock;
 * reads the connections' queues and the peers' announcements only. */
#define WEFT__OVERSUB_SPIN_BYTES 1024u
int weft__task_spin_for_peers(const struct weft_comm *comm, weft__coll_t coll);

/* A short description for error messages: "all_reduce #42 (1024 x float32 sum)". */
const char *weft__task_describe(const weft__task *t, char *buf, size_t len);

/* Picks the algorithm for t: a row whose `wanted` says so (the direct algorithms, when its
 * buffers may be in registered windows), else the tuner's choice (lib/select.c). */
const weft__algo *weft__select_algo(const weft__task *t);
/* The tuner's choice for t (the cost model, or what WEFT_ALGO forces), `wanted` rows aside. */
const weft__algo *weft__select_modelled(const weft__task *t);
/* Frees the tuner's per-communicator cache (comm.c, at destroy). */
void weft__select_comm_free(struct weft_comm *comm);

#endif

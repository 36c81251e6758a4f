/* comm.h: the communicator. */
#ifndef WEFT_COMM_H
#define WEFT_COMM_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include "weft.h"
#include "lib/req.h"
#include "lib/fingerprint.h"
#include "lib/flight.h"
#include "lib/op_lock.h"

struct weft__task;

/* What every rank tells every other at init (bootstrap all-gather). */
typedef struct {
  uint64_t host_hash;   /* equal for ranks that can share memory (see host.c) */
  int32_t pid;
  int32_t rank;
  char hostname[64];
  char transport[16];   /* WEFT_TRANSPORT ("auto" when unset): ranks must agree (connect.c) */
} weft__peer_info;

/* Slots of per-transport state on a communicator (transports/transport.h's limit). */
enum { WEFT__COMM_TRANSPORTS = 8 };

enum { WEFT__INIT_RUNNING = 0, WEFT__INIT_DONE = 1, WEFT__INIT_FAILED = 2 };

struct weft_comm {
  int rank;
  int nranks;
  int timeout_ms;            /* deadline of every wait with no progress */
  size_t chunk_bytes;        /* pipeline chunk of the ring and chain algorithms (WEFT_CHUNK_BYTES) */
  uint8_t secret[16];        /* the unique id's secret: names shared resources of this comm */

  int bootstrap_fd;          /* connection to the root; -1 when closed */
  int bootstrap_failed_rank; /* set once the root reported a failure (-1: the root); -2: none */
  int root_host_rank;        /* the rank whose process hosts the bootstrap root (its end
                                closing means that rank died), -1: none, or it left cleanly */
  char bootstrap_failed_text[256];

  weft__peer_info *peers;    /* [nranks] */
  weft__conn *conns;         /* [nranks]: conns[p].tr is the transport chosen for peer p
                                (transports/transport.h); NULL for self */
  /* Per transport, by its index in the registry (transports/registry.c): its state, and
   * the capabilities the core may use (declared, masked by WEFT_TRANSPORT_CAPS). */
  void *transport_state[WEFT__COMM_TRANSPORTS];
  unsigned transport_caps[WEFT__COMM_TRANSPORTS];
  unsigned caps_all;         /* the capabilities every peer's transport has (all bits: no peer) */
  const struct weft__transport *forced_transport; /* WEFT_TRANSPORT's, or NULL (auto) */
  /* The before_collective hooks of the transports with WEFT__TRANSPORT_CAP_PLACEMENT, in
   * registry order (lib/task.c runs them before every operation). */
  weft_status_t (*before[WEFT__COMM_TRANSPORTS])(struct weft__task *t);
  int nbefore;
  size_t before_min_bytes; /* the smallest of their before_min_bytes (SIZE_MAX: none) */
  /* The yielding hooks of the transports with WEFT__TRANSPORT_CAP_WAIT that have one, in
   * registry order (lib/task.c calls them around each sched_yield). */
  void (*yielding[WEFT__COMM_TRANSPORTS])(struct weft_comm *comm, int on);
  int nyielding;
  struct weft__topo_system *topo; /* the merged system view (topo/topo.h), built at init */
  int *ring;                 /* [nranks]: the rank at ring position p (topo order), or NULL:
                                rank order */
  int *ring_pos;             /* [nranks]: the ring position of rank r, or NULL */
  _Atomic(struct weft__tuner_cache *) tuner; /* select.c's per-comm facts and last choices */

  weft__op_lock lock;        /* held while an operation runs (lib/op_lock.h) */
  uint64_t last_seq;         /* sequence number of the last launched operation */
  uint64_t coll_seq;         /* collectives launched: every rank counts the same ones */
  uint64_t p2p_seq;          /* sends, receives and groups of them launched by this rank */
  weft__fp_call call;        /* the running call's fingerprint (lib/fingerprint.h), under lock */
  atomic_int aborted;        /* weft_comm_abort was called */
  atomic_int revoked;        /* 0, or 1 + the rank that revoked it (lib/comm_revoke.c) */
  struct weft__ft *ft;       /* the fault-tolerance channel (lib/ft.h), or NULL */
  atomic_int pending;        /* operations queued on streams, not finished */
  atomic_int async_error;    /* first error of a stream operation */
  int broken;                /* a transfer failed mid-message: the connections are unusable */
  int check_all;             /* WEFT_CHECK=1: lib/check.h's exchange before every collective */
  int oversubscribed;        /* more ranks on this host than cores: waiting ranks yield at once */
  /* A large scratch an algorithm needs for one call (in-place all-to-all's staged input),
   * kept for the next call: allocating it per call cost page faults on every call (64 MiB
   * in place took 47.9 ms against 6.8 ms out of place). Used only under lock (one task at
   * a time); freed with the communicator (lib/algo.h: weft__comm_scratch). */
  void *scratch;
  size_t scratch_bytes;
  /* Registered windows (lib/window.h), under lock: the list, the last id handed out, and
   * how many are usable for direct collectives. All three are the same on every rank,
   * since registration and deregistration are collective. */
  struct weft_window *windows;
  uint64_t window_serial;
  int direct_windows;
  size_t direct_min_bytes; /* WEFT_DIRECT_MIN_BYTES, the largest of all ranks' (agreed) */
  uint64_t direct_calls, direct_fallbacks; /* calls that ran direct / fell back (tests) */
  /* This rank's own registrations (weft_comm_register, lib/reg.h), under lock, and the
   * peers' registrations mapped here: WEFT__REG_IMPORTS slots per peer, least recently
   * used (reg_clock) evicted first; NULL until the first direct call needs one. */
  struct weft_reg *regs;
  size_t reg_min_bytes;      /* WEFT_DIRECT_MIN_BYTES here, read at registration */
  struct weft__reg_import_slot *reg_imports;
  uint64_t reg_clock;

  weft__flight flight;       /* the last operations (lib/flight.h), under lock */

  atomic_int init_state;     /* WEFT__INIT_* */
  weft_status_t init_status;
  pthread_t init_thread;
  int init_thread_started;

  pthread_mutex_t err_lock;
  char last_error[1024];
  /* 1 while a call drives its requests (lib/task.c): weft__error records errors raised on
   * this communicator but does not log them; the call logs once, with the operation named.
   * Here rather than in the per-thread flag (weft__error_quiet): a thread-local variable
   * of a shared library costs a __tls_get_addr call on each access, and setting and clearing
   * it was 8% of the samples of an 8-byte broadcast's receiver (perf). Written by the thread
   * holding lock. */
  atomic_int errors_quiet;
};

/* comm's connection to peer. */
static inline weft__conn *weft__comm_conn(struct weft_comm *comm, int peer) {
  return &comm->conns[peer];
}

/* Whether comm has memory registered for direct collectives: windows usable for them, or
 * this rank's own registrations. Without either no call runs direct (algos/direct.c), which
 * the tuner tests before asking. Read under comm->lock, as both lists change under it. */
static inline int weft__comm_has_registrations(const struct weft_comm *comm) {
  return comm->direct_windows > 0 || comm->regs != NULL;
}

/* How many of comm's ranks run on this rank's host (this one included), from the system
 * view built at init; 1 before it exists. Thread-safe (reads only). */
int weft__comm_host_nranks(const struct weft_comm *comm);

/* Chooses each peer's transport and connects them all (lib/connect.c). Errors name the
 * rank and the peer or transport. */
weft_status_t weft__comm_connect(struct weft_comm *comm);
/* Closes every transport's state of comm (safe after a failed or partial connect). */
void weft__comm_close_transports(struct weft_comm *comm);

/* Waits for a non-blocking init to end; returns its status (WEFT_SUCCESS when ready). */
weft_status_t weft__comm_wait_ready(struct weft_comm *comm);

/* The host identity of this process: equal for processes that can share memory through
 * memfd and abstract Unix sockets (same kernel boot, same network namespace), unless
 * WEFT_HOSTID overrides it. Fills hostname too. */
uint64_t weft__host_hash(char *hostname, size_t len);
#endif

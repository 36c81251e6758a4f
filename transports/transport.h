/* transport.h: the interface every transport implements (transports/<name>/: shm and socket
 * today; CUDA IPC and RDMA next), and the only thing the core knows of one. A transport
 * connects this rank to the peers it is chosen for, and moves the bytes of one message at
 * a time to or from one peer. It never computes on the bytes: a receive hands incoming
 * data to the core (weft__req_land / weft__req_deliver, lib/req.h), which copies or
 * reduces it into the destination through the message's memory space (mem/space.h). As in
 * NCCL (src/include/transport.h: canConnect, setup, connect, send / recv progress) and Gloo
 * (a pair that sends and receives into registered buffers); no code taken.
 *
 * The contract.
 *
 * Choice. For every pair of ranks the core asks each registered transport (transports/
 * registry.c) can_connect(topology, a, b) and takes the highest preference; WEFT_TRANSPORT
 * =<name> forces one, and fails naming the peer it cannot reach. can_connect reads only the
 * system view (identical on every rank) and is symmetric in a and b, so both ranks of a
 * pair pick the same transport.
 *
 * Setup, in two steps, so no rank ever blocks waiting for a peer:
 *   listen   local only: makes what peers connect to (a socket, a shared segment) and
 *            fills this rank's card (card_bytes, what peers need to reach it). Every rank
 *            calls it for every transport, with its own peers (possibly none), then the
 *            core all-gathers all cards in one bootstrap round. A rank whose listen failed
 *            still publishes its card (the transport marks it so), and its peers fail at
 *            once naming it, instead of timing out.
 *   connect  called by the core again and again until it returns WEFT_SUCCESS or an
 *            error: WEFT_IN_PROGRESS means it waits for a peer (a connection to accept, an
 *            answer to read). A call may take a local system call or one round trip, never
 *            a wait for a peer to act. The core bounds the whole setup by the communicator's
 *            timeout and checks for failed ranks between calls; a transport keeps no
 *            deadline of its own.
 *   close    frees everything of comm's for this transport: safe after a failed or partial
 *            setup, and at destroy (peers are gone or going).
 *
 * Moving bytes. The core queues requests per connection (weft__conn, lib/req.h): the i-th
 * send posted to a peer matches the i-th receive that peer posts from us; only the head
 * of each queue moves. post (optional) tells the transport a request was queued, so it can
 * start it at once (a receiver-driven transport posts its clear-to-send then); send_test
 * and recv_test move the head request as far as they can without blocking, set r->done,
 * r->complete and *progressed, and return errors that name this rank and the peer ("rank
 * 3: recv from peer 1: ..."): a failed peer is WEFT_ERR_REMOTE, a size mismatch
 * WEFT_ERR_INVALID_USAGE. After an error the core breaks the communicator.
 *
 * Buffers: who owns what, when. The caller owns src and dst until the request completes;
 * the transport reaches them only through r->mem (host_view, or copy / reduce through the
 * space, or weft__req_land), never by dereferencing them, and never after it set complete.
 * A transport's own buffers (FIFOs, staging) are its own. A receive completes only when
 * its bytes are in place in dst (weft__req_land waits for the space where it must); a send
 * completes when the transport no longer needs src. Registered memory (reg / dereg) stays
 * registered until dereg; the core registers every window (lib/window.c) with every
 * transport that has reg.
 *
 * What may block: listen and close (local system calls); connect (briefly, see above);
 * reg and dereg (registration, collective through the core). post, send_test, recv_test,
 * poll_fds, sleep_begin, sleep_end, yielding, peer_on_cpu and peer_failed never block. sleep
 * blocks at most the time it is given. before_collective waits for its partners, up to the
 * timeout.
 *
 * Optional capabilities, declared in caps and discovered by the core, never assumed (a
 * test runs the sweep with them masked off: WEFT_TRANSPORT_CAPS, lib/comm.c):
 *   RECV_REDUCE  receives may reduce on arrival (dst = acc op incoming), handed over in
 *                whole elements through weft__req_land: one pass over memory less than a
 *                receive into scratch and a reduction after. Without it the core receives
 *                into a bounce buffer and reduces when the message is complete.
 *   INLINE       small messages travel inline with their header or flag (shm's LL lines:
 *                one cache line per message); reported by the core at init.
 *   PEER_MEMORY  a peer's buffers imported through their memory space (registered windows)
 *                may be loaded from and stored to directly from here: one-sided put and get,
 *                which the direct algorithms use (their rows need it).
 *   WAIT         the core may sleep until a peer signals (sleep_begin, sleep, sleep_end:
 *                shm's doorbells); without it a waiting rank naps in short steps.
 *   LIVENESS     peer_failed tells whether a peer the core waits for is gone (shm: its
 *                process died); without it only errors and the deadline end a wait.
 *   PLACEMENT    before_collective runs at the start of every collective on every rank, in
 *                the same order (shm's placement probe).
 *   NT_LANDING   receives outside registered windows land through weft__req_land, so a
 *                request's nt (stores past the cache) is honored: the ring all-reduce
 *                arranges large out-of-place calls around it (algos/all_reduce/ring.c).
 *                Without it (socket: the kernel copies a plain receive straight into dst,
 *                with ordinary stores) nt is ignored and that arrangement only adds a copy.
 *   SEND_SLOT    send_slot and send_commit: the core may write the next piece of a send
 *                straight into the transport's buffer (shm's FIFO slot), so a receive that
 *                feeds that send passes each piece on as it lands (reduced straight into
 *                the slot where its dst is a scratch), instead of after the whole message
 *                (weft__req.fwd; NCCL's recvReduceSend / recvCopySend).
 * A transport whose waits are on file descriptors also gives poll_fds; the core polls them. */
#ifndef WEFT_TRANSPORT_H
#define WEFT_TRANSPORT_H
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include "weft.h"
#include "lib/req.h"

struct weft_comm;
struct weft__task;
struct weft__topo_system;
struct weft__mem_space;

enum {
  WEFT__TRANSPORT_CAP_RECV_REDUCE = 1u << 0,
  WEFT__TRANSPORT_CAP_INLINE = 1u << 1,
  WEFT__TRANSPORT_CAP_PEER_MEMORY = 1u << 2,
  WEFT__TRANSPORT_CAP_WAIT = 1u << 3,
  WEFT__TRANSPORT_CAP_LIVENESS = 1u << 4,
  WEFT__TRANSPORT_CAP_PLACEMENT = 1u << 5,
  WEFT__TRANSPORT_CAP_NT_LANDING = 1u << 6,
  WEFT__TRANSPORT_CAP_SEND_SLOT = 1u << 7,
  WEFT__TRANSPORT_CAP_ALL = (1u << 8) - 1,
};

/* The tuner's alpha-beta-gamma row for a transport (lib/algo.h's cost model), measured on
 * it; WEFT_TUNER_MODEL=<name>:alpha,beta,gamma,oversub_alpha,oversub_beta replaces it. */
typedef struct weft__transport_model {
  double alpha_us;      /* one dependent message step (post, deliver, the peer noticing) */
  double beta_us;       /* per KiB moved through the transport (one pass over memory) */
  double gamma_us;      /* per KiB reduced */
  double oversub_alpha; /* added to alpha when ranks outnumber cores */
  double oversub_beta;  /* beta and gamma are multiplied by this then (cores are shared) */
} weft__transport_model;

/* A row fitted with `weft-tune --measure` on one kind of machine, named by its CPU
 * (weft__cpu_key, lib/cpu_key.h). A communicator whose ranks all share one host of that CPU
 * costs with it instead of .model (lib/select.c; on several hosts ranks could name different
 * CPUs and choose differently, so there they keep .model); WEFT_TUNER_MODEL replaces both.
 * Why per machine kind: the cost of a step with more ranks than cores is the scheduler's and
 * the hypervisor's, and it differed 2-3x between the VMs weft is developed on, as NCCL's
 * tuning tables differ by CPU vendor and GPU architecture. */
typedef struct weft__transport_model_fit {
  const char *cpu;             /* "GenuineIntel 6/167"; NULL ends a list */
  weft__transport_model model;
} weft__transport_model_fit;

typedef struct weft__transport {
  const char *name;              /* "shm", "socket": WEFT_TRANSPORT, WEFT_TUNER_MODEL, logs */
  unsigned caps;                 /* WEFT__TRANSPORT_CAP_* */
  weft__transport_model model;
  const weft__transport_model_fit *fits; /* rows fitted per machine kind; NULL: none */
  size_t card_bytes;             /* what listen fills, at most WEFT__TRANSPORT_CARD_MAX */

  /* Preference for ranks a and b (0: cannot; larger wins). Pure and symmetric. */
  int (*can_connect)(const struct weft__topo_system *topo, int a, int b);
  weft_status_t (*listen)(struct weft_comm *comm, const int *peers, int npeers, void *card);
  /* cards[r]: rank r's card (every rank's; those of this transport's peers matter). On
   * WEFT_IN_PROGRESS it writes what it waits for into waiting, naming the peers ("peers 2 5
   * to connect"), for the core's timeout message. */
  weft_status_t (*connect)(struct weft_comm *comm, const void *const *cards, char *waiting, size_t len);
  void (*close)(struct weft_comm *comm);

  /* Optional: registers buf (bytes, in space) for this transport's peers; *handle is the
   * transport's. Collective over comm (the core calls it on every rank alike). */
  weft_status_t (*reg)(struct weft_comm *comm, const struct weft__mem_space *space, void *buf,
                       size_t bytes, void **handle);
  void (*dereg)(struct weft_comm *comm, void *handle);

  /* Optional: r was queued on c (lib/req.c). Cannot fail: a failure is recorded and
   * returned by the next test of r. */
  void (*post)(weft__conn *c, weft__req *r);
  weft_status_t (*send_test)(struct weft_comm *comm, weft__conn *c, weft__req *r, int *progressed);
  weft_status_t (*recv_test)(struct weft_comm *comm, weft__conn *c, weft__req *r, int *progressed);
  /* SEND_SLOT: where the core may write the next n bytes of send r (bytes [r->done,
   * r->done + n), n <= r->bytes - r->done) itself, when c's send queue is empty and r is
   * the next send to go on c (initialised, call set, not queued): a buffer of the
   * transport's that this transport would have copied those bytes into, with *flags the
   * copy flags it would have used (WEFT__MEM_NT). NULL when there is no room now, or r
   * would not travel that way (too small, single copy, n larger than a piece): the core
   * then lets r go the usual way. After a non-NULL answer the core writes the n bytes,
   * waits for its space (weft__mem_publish) and calls send_commit(comm, c, r, n), which
   * publishes them, advances r->done and completes r at its last byte. Neither blocks. */
  void *(*send_slot)(struct weft_comm *comm, weft__conn *c, weft__req *r, size_t n, unsigned *flags);
  void (*send_commit)(struct weft_comm *comm, weft__conn *c, weft__req *r, size_t n);

  /* Optional: up to max pollfds the requests queued on c wait on; returns how many. */
  int (*poll_fds)(weft__conn *c, struct pollfd *fds, int max);
  /* WAIT: sleep_begin announces the sleep (0: nothing to sleep on) and returns the token
   * sleep waits on; the core then looks for work once more, sleeps at most max_ns unless
   * a peer signals, and always calls sleep_end. */
  int (*sleep_begin)(struct weft_comm *comm, uint32_t *token);
  void (*sleep)(struct weft_comm *comm, uint32_t token, uint64_t max_ns);
  void (*sleep_end)(struct weft_comm *comm);
  /* Optional, with WAIT: yielding(comm, 1) just before the core gives its CPU away in
   * sched_yield, (comm, 0) when it has it back; peer_on_cpu(c) is 0 when c's peer has
   * announced a yield or a sleep, 1 otherwise (it may still have been preempted). With
   * more ranks than cores they let a rank that waits for a small message from a peer
   * bound to other CPUs spin while that peer runs, instead of yielding (lib/task.c). */
  void (*yielding)(struct weft_comm *comm, int on);
  int (*peer_on_cpu)(const weft__conn *c);
  /* LIVENESS: 1 when peer is gone, with *why ("exited (its process is gone)"). */
  int (*peer_failed)(struct weft_comm *comm, int peer, const char **why);
  /* PLACEMENT: errors name the rank and the peer (a probe partner that never came). */
  weft_status_t (*before_collective)(struct weft__task *t);
  /* PLACEMENT: collectives of fewer bytes per rank (count * element size) have nothing for
   * before_collective, which the core then does not call (a small call's latency path). */
  size_t before_min_bytes;
} weft__transport;

enum { WEFT__TRANSPORT_CARD_MAX = 256, WEFT__MAX_TRANSPORTS = 8 };

/* The registry (transports/registry.c): every transport, in order of precedence for equal
 * preferences, NULL-terminated. */
extern const weft__transport *const weft__transports[];
/* The registered transport called name, or NULL. */
const weft__transport *weft__transport_by_name(const char *name);
/* Index of tr in weft__transports (the slot of comm->transport_state), or -1. */
int weft__transport_index(const weft__transport *tr);
/* The transport the core picks for ranks a and b under topo (forced: WEFT_TRANSPORT's, or
 * NULL for auto), or NULL when none can connect them. */
const weft__transport *weft__transport_choose(const struct weft__topo_system *topo, int a, int b,
                                              const weft__transport *forced);
#endif

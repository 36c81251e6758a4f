/* shm.c: the shared-memory transport, weft's path between processes of one host.
 *
 * Each rank owns one memfd segment holding its inbound FIFOs, one per shm peer (layout in
 * shm_fifo.h). Setup, collective over all ranks:
 *   1. create the segment and listen on an abstract socket named by the comm's secret and
 *      our rank; all-gather (ok, nslots, slot_bytes) so every listener exists before
 *      anyone connects and every rank learns at once whether the settings agree;
 *   2. connect to every peer and send a hello (rank, settings); a connect to a listening
 *      Unix socket completes from the backlog, so nobody waits for an accept here;
 *   3. accept every peer, check its hello (and its pid via SO_PEERCRED), answer with our
 *      segment's fd (SCM_RIGHTS) and the offset of the FIFO that peer writes into;
 *   4. read each answer on our outgoing connections and map the peer's segment;
 *   5. close every socket and fd: only the mappings remain, and the kernel frees a segment
 *      when its last mapping goes, whether ranks exit cleanly or die. /dev/shm is unused.
 * Moving a message of B bytes: the sender copies it into max(1, ceil(B / slot)) slots of
 * the receiver's FIFO, the receiver copies (or reduces) it out: 2B bytes of memory traffic
 * per side, no system call, no lock; the counters are only re-read when the locally cached
 * copy says the FIFO is full (sender) or empty (receiver). Messages of up to 48 bytes ride
 * in the slot header's cache line, so a tiny message moves two lines (header, tail).
 * Environment: WEFT_SHM_NSLOTS (default 8) and WEFT_SHM_SLOT_BYTES (default 256K, a
 * multiple of 64) must be set the same on every rank; setup fails naming the rank that
 * differs. Ideas from NCCL's shm transport and Open MPI's vader FIFOs; no code taken. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "lib/bootstrap.h"
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/status.h"
#include "transports/shm/shm_fifo.h"
#include "transports/shm/shm_segment.h"
#include "transports/transport.h"

#define SHM_DEFAULT_NSLOTS 8
#define SHM_DEFAULT_SLOT_BYTES (256u * 1024u)
#define SHM_MAX_NSLOTS 4096
#define SHM_MIN_SLOT_BYTES 64u
#define SHM_MAX_SLOT_BYTES (1ull << 30)
#define SHM_MAGIC 0x4d485357u /* "WSHM" */
#define SHM_SLICE_NS 100000000ull /* how often long setup waits look for failed ranks */

/* Per-peer state, reached through weft__conn.priv. The counters are our private copies:
 * `tail` / `head` are ours to advance, `*_seen` the last value read of the other side's. */
typedef struct {
  weft__shm_fifo out; /* we send: lives in the peer's segment */
  uint64_t tail, head_seen;
  weft__shm_fifo in;  /* we receive: lives in our segment */
  uint64_t head, tail_seen;
} shm_conn;

typedef struct {
  int npeers;
  int *peers;                 /* [npeers] ranks; index i owns FIFO i of our segment */
  size_t nslots, slot_bytes, fifo_bytes;
  weft__shm_segment own;
  weft__shm_segment *remote;  /* [npeers], the peer's segment we write into */
  shm_conn *conns;            /* [npeers] */
  int listen_fd;
  int *out_fds, *in_fds;      /* [npeers] setup sockets: we connected / we accepted */
} shm_state;

/* What ranks all-gather in step 1. */
typedef struct {
  int32_t ok;
  int32_t pad;
  uint64_t nslots, slot_bytes;
} shm_info;

/* The hello (connector -> acceptor) and the answer that carries the segment fd. */
typedef struct {
  uint32_t magic;
  int32_t rank, to;
  int32_t pad;
  uint64_t nslots, slot_bytes;
  uint64_t fifo_offset, seg_bytes; /* answer only */
} shm_msg;

static weft_status_t read_settings(struct weft_comm *comm, size_t *nslots, size_t *slot_bytes) {
  long n = weft__env_long("WEFT_SHM_NSLOTS", SHM_DEFAULT_NSLOTS);
  size_t s = weft__env_size("WEFT_SHM_SLOT_BYTES", SHM_DEFAULT_SLOT_BYTES);
  if (n < 1 || n > SHM_MAX_NSLOTS)
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT,
                       "rank %d: shm setup: WEFT_SHM_NSLOTS=%ld must be between 1 and %d",
                       comm->rank, n, SHM_MAX_NSLOTS);
  if (s < SHM_MIN_SLOT_BYTES || s > SHM_MAX_SLOT_BYTES || s % 64 != 0)
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT,
                       "rank %d: shm setup: WEFT_SHM_SLOT_BYTES=%zu must be a multiple of 64 "
                       "between 64 and 1G", comm->rank, s);
  *nslots = (size_t)n;
  *slot_bytes = s;
  return WEFT_SUCCESS;
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static shm_state *state_new(const int *peers, int npeers) {
  shm_state *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  size_t n = npeers > 0 ? (size_t)npeers : 1;
  st->npeers = npeers;
  st->listen_fd = -1;
  st->own = (weft__shm_segment)WEFT__SHM_SEGMENT_INIT;
  st->peers = calloc(n, sizeof *st->peers);
  st->remote = calloc(n, sizeof *st->remote);
  st->conns = calloc(n, sizeof *st->conns);
  st->out_fds = calloc(n, sizeof *st->out_fds);
  st->in_fds = calloc(n, sizeof *st->in_fds);
  if (!st->peers || !st->remote || !st->conns || !st->out_fds || !st->in_fds) return st;
  for (int i = 0; i < npeers; i++) {
    st->peers[i] = peers[i];
    st->remote[i] = (weft__shm_segment)WEFT__SHM_SEGMENT_INIT;
    st->out_fds[i] = st->in_fds[i] = -1;
  }
  return st;
}

static void close_setup_fds(shm_state *st) {
  close_fd(&st->listen_fd);
  for (int i = 0; st->out_fds && st->in_fds && i < st->npeers; i++) {
    close_fd(&st->out_fds[i]);
    close_fd(&st->in_fds[i]);
  }
  weft__shm_segment_close_fd(&st->own);
}

static int peer_index(const shm_state *st, int rank) {
  for (int i = 0; i < st->npeers; i++)
    if (st->peers[i] == rank) return i;
  return -1;
}

/* Step 1's local half: segment and listening socket. A failure is recorded, not returned,
 * so this rank still joins the all-gather and its peers fail fast instead of timing out. */
static weft_status_t prepare_local(struct weft_comm *comm, shm_state *st) {
  if (!st->peers || !st->remote || !st->conns || !st->out_fds || !st->in_fds)
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: shm setup: out of memory", comm->rank);
  WEFT_TRY(read_settings(comm, &st->nslots, &st->slot_bytes));
  if (st->npeers == 0) return WEFT_SUCCESS;
  st->fifo_bytes = weft__shm_fifo_bytes(st->nslots, st->slot_bytes);
  char name[64];
  snprintf(name, sizeof name, "weft-shm-rank%d", comm->rank);
  if (weft__shm_segment_create(&st->own, name, st->fifo_bytes * (size_t)st->npeers) != 0)
    return weft__error(comm, WEFT_ERR_SYSTEM,
                       "rank %d: shm setup: creating a %zu-byte memfd segment: %s", comm->rank,
                       st->fifo_bytes * (size_t)st->npeers, strerror(errno));
  for (int i = 0; i < st->npeers; i++)
    weft__shm_fifo_attach(&st->conns[i].in, (char *)st->own.base + (size_t)i * st->fifo_bytes,
                          st->nslots, st->slot_bytes);
  st->listen_fd = weft__shm_sock_listen(comm->secret, comm->rank, st->npeers + 16);
  if (st->listen_fd < 0 && errno == EADDRINUSE)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                       "rank %d: shm setup: another communicator of the same unique id and rank is "
                       "being set up on this host; use a new unique id per communicator", comm->rank);
  if (st->listen_fd < 0)
    return weft__error(comm, WEFT_ERR_SYSTEM,
                       "rank %d: shm setup: listening on an abstract Unix socket: %s",
                       comm->rank, strerror(errno));
  return WEFT_SUCCESS;
}

/* Step 1's collective half: checks every peer got as far and uses the same settings. */
static weft_status_t exchange_info(struct weft_comm *comm, shm_state *st, weft_status_t local) {
  shm_info mine = {.ok = local == WEFT_SUCCESS, .nslots = st->nslots, .slot_bytes = st->slot_bytes};
  shm_info *all = calloc((size_t)comm->nranks, sizeof *all);
  if (!all) return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: shm setup: out of memory", comm->rank);
  weft_status_t s = weft__bootstrap_allgather(comm, &mine, sizeof mine, all);
  for (int i = 0; s == WEFT_SUCCESS && local == WEFT_SUCCESS && i < st->npeers; i++) {
    const shm_info *p = &all[st->peers[i]];
    if (!p->ok)
      s = weft__error(comm, WEFT_ERR_REMOTE,
                      "rank %d: shm setup: peer %d failed to prepare its shared memory",
                      comm->rank, st->peers[i]);
    else if (p->nslots != st->nslots || p->slot_bytes != st->slot_bytes)
      s = weft__error(comm, WEFT_ERR_INVALID_USAGE,
                      "rank %d: shm setup: peer %d uses WEFT_SHM_NSLOTS=%llu "
                      "WEFT_SHM_SLOT_BYTES=%llu but this rank %zu and %zu; set them the same "
                      "on every rank", comm->rank, st->peers[i], (unsigned long long)p->nslots,
                      (unsigned long long)p->slot_bytes, st->nslots, st->slot_bytes);
  }
  free(all);
  return local != WEFT_SUCCESS ? local : s;
}

/* After a slice of a long wait ran out: go on waiting, or stop because a rank failed or
 * the deadline passed. `what` names the step and the peer ("connecting to peer 3"). */
static weft_status_t keep_waiting(struct weft_comm *comm, uint64_t deadline, const char *what) {
  int failed = -2;
  const char *why = NULL;
  if (weft__bootstrap_check_failure(comm, &failed, &why) != WEFT_SUCCESS)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: shm setup: %s: rank %d failed (%s)",
                       comm->rank, what, failed, why ? why : "unknown");
  if (weft__now_ns() >= deadline)
    return weft__error(comm, WEFT_ERR_TIMEOUT, "rank %d: shm setup: %s: timed out after %d ms",
                       comm->rank, what, comm->timeout_ms);
  return WEFT_SUCCESS;
}

static uint64_t slice_end(uint64_t deadline) {
  uint64_t t = weft__now_ns() + SHM_SLICE_NS;
  return t < deadline ? t : deadline;
}

static weft_status_t sock_failed(struct weft_comm *comm, const char *what) {
  if (errno == ECONNRESET || errno == ECONNREFUSED || errno == EPIPE)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: shm setup: %s: the peer closed the connection",
                       comm->rank, what);
  return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: shm setup: %s: %s", comm->rank, what,
                     strerror(errno));
}

/* Receives one setup message on fd, waiting in slices. */
static weft_status_t recv_msg(struct weft_comm *comm, int fd, uint64_t deadline, shm_msg *m,
                              int *got_fd, const char *what) {
  for (;;) {
    if (weft__shm_sock_recv(fd, m, sizeof *m, got_fd, slice_end(deadline)) == 0) break;
    if (errno != ETIMEDOUT) return sock_failed(comm, what);
    WEFT_TRY(keep_waiting(comm, deadline, what));
  }
  if (m->magic != SHM_MAGIC || m->to != comm->rank) {
    if (got_fd && *got_fd >= 0) close_fd(got_fd);
    return weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: shm setup: %s: malformed message",
                       comm->rank, what);
  }
  return WEFT_SUCCESS;
}

/* Step 2: connect to every peer and say who we are. */
static weft_status_t connect_all(struct weft_comm *comm, shm_state *st, uint64_t deadline) {
  char what[64];
  for (int i = 0; i < st->npeers; i++) {
    int peer = st->peers[i];
    snprintf(what, sizeof what, "connecting to peer %d", peer);
    while ((st->out_fds[i] = weft__shm_sock_connect(comm->secret, peer, slice_end(deadline))) < 0) {
      if (errno != ETIMEDOUT) return sock_failed(comm, what);
      WEFT_TRY(keep_waiting(comm, deadline, what));
    }
    shm_msg hello = {.magic = SHM_MAGIC, .rank = comm->rank, .to = peer,
                     .nslots = st->nslots, .slot_bytes = st->slot_bytes};
    if (weft__shm_sock_send(st->out_fds[i], &hello, sizeof hello, -1, deadline) != 0)
      return sock_failed(comm, what);
  }
  return WEFT_SUCCESS;
}

/* The process at the other end of a setup socket (the one that connected, or the one that
 * listened) must be the one the bootstrap told us about. */
static weft_status_t check_peer_cred(struct weft_comm *comm, int fd, int peer) {
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return WEFT_SUCCESS;
  if (cred.uid == getuid() && (comm->peers[peer].pid <= 0 || cred.pid == comm->peers[peer].pid))
    return WEFT_SUCCESS;
  return weft__error(comm, WEFT_ERR_AUTH,
                     "rank %d: shm setup: a connection claiming to be peer %d belongs to pid %d "
                     "uid %d, expected pid %d", comm->rank, peer, (int)cred.pid, (int)cred.uid,
                     (int)comm->peers[peer].pid);
}

/* Names the peers that have not connected yet ("waiting for peers 2 5 to connect"). */
static void describe_missing(const shm_state *st, char *buf, size_t len) {
  size_t at = (size_t)snprintf(buf, len, "waiting for peers");
  for (int i = 0; i < st->npeers && at + 16 < len; i++)
    if (st->in_fds[i] < 0) at += (size_t)snprintf(buf + at, len - at, " %d", st->peers[i]);
  snprintf(buf + at, len - at, " to connect");
}

/* Step 3, one peer: accept, check the hello, answer with our segment. */
static weft_status_t accept_one(struct weft_comm *comm, shm_state *st, uint64_t deadline) {
  char what[256];
  describe_missing(st, what, sizeof what);
  int fd;
  while ((fd = weft__shm_sock_accept(st->listen_fd, slice_end(deadline))) < 0) {
    if (errno != ETIMEDOUT) return sock_failed(comm, what);
    WEFT_TRY(keep_waiting(comm, deadline, what));
  }
  shm_msg m;
  weft_status_t s = recv_msg(comm, fd, deadline, &m, NULL, "reading a peer's hello");
  int i = s == WEFT_SUCCESS ? peer_index(st, m.rank) : -1;
  if (s == WEFT_SUCCESS && (i < 0 || st->in_fds[i] >= 0))
    s = weft__error(comm, WEFT_ERR_INTERNAL,
                    "rank %d: shm setup: unexpected connection from rank %d", comm->rank, m.rank);
  if (s != WEFT_SUCCESS) {
    close(fd);
    return s;
  }
  st->in_fds[i] = fd;
  if (m.nslots != st->nslots || m.slot_bytes != st->slot_bytes)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                       "rank %d: shm setup: peer %d uses WEFT_SHM_NSLOTS=%llu WEFT_SHM_SLOT_BYTES=%llu "
                       "but this rank %zu and %zu; set them the same on every rank", comm->rank,
                       m.rank, (unsigned long long)m.nslots, (unsigned long long)m.slot_bytes,
                       st->nslots, st->slot_bytes);
  WEFT_TRY(check_peer_cred(comm, fd, m.rank));
  shm_msg answer = {.magic = SHM_MAGIC, .rank = comm->rank, .to = m.rank,
                    .nslots = st->nslots, .slot_bytes = st->slot_bytes,
                    .fifo_offset = (uint64_t)i * st->fifo_bytes, .seg_bytes = st->own.bytes};
  snprintf(what, sizeof what, "sending the segment to peer %d", m.rank);
  if (weft__shm_sock_send(fd, &answer, sizeof answer, st->own.fd, deadline) != 0)
    return sock_failed(comm, what);
  return WEFT_SUCCESS;
}

/* Step 4, one peer: read its answer and map its segment. */
static weft_status_t map_peer(struct weft_comm *comm, shm_state *st, int i, uint64_t deadline) {
  int peer = st->peers[i], seg_fd = -1;
  char what[64];
  snprintf(what, sizeof what, "receiving the segment of peer %d", peer);
  shm_msg m;
  WEFT_TRY(recv_msg(comm, st->out_fds[i], deadline, &m, &seg_fd, what));
  weft_status_t s = check_peer_cred(comm, st->out_fds[i], peer);
  if (s != WEFT_SUCCESS) {
    close_fd(&seg_fd);
    return s;
  }
  if (m.rank != peer || seg_fd < 0 || m.fifo_offset + st->fifo_bytes > m.seg_bytes) {
    close_fd(&seg_fd);
    return weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: shm setup: %s: malformed answer",
                       comm->rank, what);
  }
  if (weft__shm_segment_map_fd(&st->remote[i], seg_fd, m.seg_bytes) != 0)
    return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: shm setup: mapping the segment of peer %d: %s",
                       comm->rank, peer, strerror(errno));
  weft__shm_fifo_attach(&st->conns[i].out, (char *)st->remote[i].base + m.fifo_offset,
                        st->nslots, st->slot_bytes);
  return WEFT_SUCCESS;
}

static weft_status_t shm_setup(struct weft_comm *comm, const int *peers, int npeers) {
  shm_state *st = state_new(peers, npeers);
  if (!st) return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: shm setup: out of memory", comm->rank);
  comm->transport_state[WEFT__TRANSPORT_SHM] = st;
  weft_status_t s = exchange_info(comm, st, prepare_local(comm, st));
  uint64_t deadline = weft__deadline_after_ms(comm->timeout_ms);
  if (s == WEFT_SUCCESS) s = connect_all(comm, st, deadline);
  for (int n = 0; s == WEFT_SUCCESS && n < npeers; n++) s = accept_one(comm, st, deadline);
  for (int i = 0; s == WEFT_SUCCESS && i < npeers; i++) s = map_peer(comm, st, i, deadline);
  close_setup_fds(st);
  if (s != WEFT_SUCCESS) return s;
  for (int i = 0; i < npeers; i++) {
    comm->conns[peers[i]].tr = &weft__transport_shm;
    comm->conns[peers[i]].priv = &st->conns[i];
  }
  if (npeers > 0)
    WEFT_INFO("shm: connected to %d peers, %zu slots of %zu bytes per direction", npeers,
              st->nslots, st->slot_bytes);
  return WEFT_SUCCESS;
}

/* Fills free slots with the next pieces of r. */
static weft_status_t shm_send_progress(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                       int *progressed) {
  shm_conn *sc = c->priv;
  weft__shm_fifo *f = &sc->out;
  if (r->complete) return WEFT_SUCCESS;
  for (;;) {
    if (sc->tail - sc->head_seen >= f->nslots) {
      sc->head_seen = atomic_load_explicit(&f->ctrl->head, memory_order_acquire);
      if (sc->tail - sc->head_seen >= f->nslots) return WEFT_SUCCESS;
    }
    size_t left = r->bytes - r->done;
    size_t n = left < f->slot_bytes ? left : f->slot_bytes;
    weft__shm_slot_hdr *h = weft__shm_fifo_hdr(f, sc->tail);
    h->msg_bytes = r->bytes;
    h->bytes = n;
    if (n > 0) /* an empty message may come with a NULL buffer: memcpy(NULL, 0) is undefined */
      memcpy(weft__shm_fifo_data(f, h, sc->tail, r->bytes), (const char *)r->src + r->done, n);
    atomic_store_explicit(&f->ctrl->tail, ++sc->tail, memory_order_release);
    r->done += n;
    *progressed = 1;
    if (r->done == r->bytes) {
      r->complete = 1;
      return WEFT_SUCCESS;
    }
  }
}

/* Hands every filled slot of r's message to r, straight out of shared memory. */
static weft_status_t shm_recv_progress(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                       int *progressed) {
  shm_conn *sc = c->priv;
  weft__shm_fifo *f = &sc->in;
  if (r->complete) return WEFT_SUCCESS;
  for (;;) {
    if (sc->head == sc->tail_seen) {
      sc->tail_seen = atomic_load_explicit(&f->ctrl->tail, memory_order_acquire);
      if (sc->head == sc->tail_seen) return WEFT_SUCCESS;
    }
    weft__shm_slot_hdr *h = weft__shm_fifo_hdr(f, sc->head);
    size_t n = h->bytes;
    if (h->msg_bytes != r->bytes)
      return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                         "rank %d: recv from peer %d: message size mismatch: peer sent %zu bytes, "
                         "expected %zu", comm->rank, c->peer, (size_t)h->msg_bytes, r->bytes);
    if (n > f->slot_bytes || n > r->bytes - r->done)
      return weft__error(comm, WEFT_ERR_INTERNAL,
                         "rank %d: recv from peer %d: corrupt shm slot (%zu bytes)", comm->rank,
                         c->peer, n);
    weft__req_deliver(r, weft__shm_fifo_data(f, h, sc->head, r->bytes), n);
    atomic_store_explicit(&f->ctrl->head, ++sc->head, memory_order_release);
    *progressed = 1;
    if (r->done == r->bytes) {
      r->complete = 1;
      return WEFT_SUCCESS;
    }
  }
}

static void shm_teardown(struct weft_comm *comm) {
  shm_state *st = comm->transport_state[WEFT__TRANSPORT_SHM];
  if (!st) return;
  comm->transport_state[WEFT__TRANSPORT_SHM] = NULL;
  close_setup_fds(st);
  for (int i = 0; st->peers && st->conns && i < st->npeers; i++) {
    weft__conn *c = &comm->conns[st->peers[i]];
    if (c->priv == &st->conns[i]) {
      c->priv = NULL;
      c->tr = NULL;
    }
  }
  for (int i = 0; st->remote && i < st->npeers; i++) weft__shm_segment_release(&st->remote[i]);
  weft__shm_segment_release(&st->own);
  free(st->peers);
  free(st->remote);
  free(st->conns);
  free(st->out_fds);
  free(st->in_fds);
  free(st);
}

const weft__transport weft__transport_shm = {
    .name = "shm",
    .setup = shm_setup,
    .send_progress = shm_send_progress,
    .recv_progress = shm_recv_progress,
    .poll_fds = NULL,
    .teardown = shm_teardown,
};

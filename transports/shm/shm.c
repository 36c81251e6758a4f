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
 * Single copy (CMA): a message of at least WEFT_SHM_CMA_BYTES moves once instead of twice.
 * The sender writes one slot header holding the message's address and keeps its request
 * open; the receiver reads the sender's buffer with process_vm_readv (Linux cross-memory
 * attach), straight into its destination, or through a 64 KiB scratch that it then
 * reduces from when it reduces on arrival, and advances head past that slot only after the
 * last byte: the sender completes when it sees head pass. B bytes cost B of memory traffic
 * (plus a cache-resident bounce when reducing) and one system call per 1 MiB. The kernel
 * may forbid CMA (Yama ptrace_scope, seccomp in containers, other pid namespaces), so in
 * step 3 the accepting rank reads a random probe word whose address and value came in the
 * connecting rank's hello; its answer carries the threshold the connecting rank must use
 * for messages to it (0 when the probe failed: two copies, with one info line). The
 * receiving rank's setting and probe thus decide for each direction and both ends agree.
 * Environment: WEFT_SHM_NSLOTS (default 8) and WEFT_SHM_SLOT_BYTES (default 256K, a
 * multiple of 64) must be set the same on every rank; setup fails naming the rank that
 * differs. WEFT_SHM_CMA_BYTES (default 0: off; e.g. 1M) is the single-copy threshold.
 * Ideas from NCCL's shm transport and Open MPI's vader FIFOs and CMA path; no code taken. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "lib/bootstrap.h"
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/status.h"
#include "lib/proto.h"
#include "mem/space.h"
#include "transports/shm/shm_conn.h"
#include "transports/shm/shm_fifo.h"
#include "transports/shm/shm_ll.h"
#include "transports/shm/shm_placement.h"
#include "transports/shm/shm_segment.h"
#include "transports/transport.h"

#define SHM_DEFAULT_NSLOTS 8
#define SHM_DEFAULT_SLOT_BYTES (256u * 1024u)
#define SHM_MAX_NSLOTS 4096
#define SHM_MIN_SLOT_BYTES 64u
#define SHM_MAX_SLOT_BYTES (1ull << 30)
#define SHM_MAGIC 0x4d485357u /* "WSHM" */
#define SHM_SLICE_NS 100000000ull /* how often long setup waits look for failed ranks */
/* Off by default: on the 2-core VM weft is developed on, process_vm_readv copies at 11-13
 * GB/s from cache and 3-5 GB/s from DRAM against memcpy's 47 and 7-13, so the two-copy
 * path, whose two copies run in parallel on two cores, won 2-rank broadcast and all-reduce
 * at every size from 128 KiB to 32 MiB (busbw 10-18 GB/s against 5-12, medians of 3). */
#define SHM_DEFAULT_CMA_BYTES 0u
#define SHM_CMA_CALL_BYTES (1u << 20)      /* read per progress call, so other peers move too */
#define SHM_CMA_PIECE (256u * 1024u)       /* per system call: larger ones ran 2x slower here */
#define SHM_CMA_REDUCE_PIECE (64u * 1024u) /* scratch of a reducing receive: stays in L2 */

typedef weft__shm_conn shm_conn;

typedef struct {
  int npeers;
  int *peers;                 /* [npeers] ranks; index i owns FIFO i of our segment */
  size_t nslots, slot_bytes, fifo_bytes;
  weft__shm_segment own;
  weft__shm_segment *remote;  /* [npeers], the peer's segment we write into */
  shm_conn *conns;            /* [npeers] */
  int listen_fd;
  int *out_fds, *in_fds;      /* [npeers] setup sockets: we connected / we accepted */
  size_t cma_bytes;           /* WEFT_SHM_CMA_BYTES: single copy from this size; 0: off */
  uint64_t probe;             /* a random word peers read to test CMA on us */
  char *scratch;              /* SHM_CMA_REDUCE_PIECE bytes, allocated on first use */
  int ll_on;                  /* WEFT_PROTO allows LL: messages of <= ll_max bytes to us use it */
  uint64_t ll_max;
  int nt_mode;                /* WEFT_SHM_NT_COPY (shm_placement.h) */
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
  uint64_t probe_addr, probe_value; /* hello only: where the sender's probe word is, and it */
  uint64_t fifo_offset, seg_bytes;  /* answer only */
  uint64_t cma_bytes;               /* answer only: the hello's sender's single-copy threshold */
  uint64_t ll_max;                  /* answer only: messages of <= ll_max bytes go LL ... */
  uint64_t ll_on;                   /* ... when this is 1 (the answering rank's WEFT_PROTO) */
} shm_msg;

static weft_status_t read_settings(struct weft_comm *comm, size_t *nslots, size_t *slot_bytes,
                                   size_t *cma_bytes) {
  *cma_bytes = weft__env_size("WEFT_SHM_CMA_BYTES", SHM_DEFAULT_CMA_BYTES);
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

/* Where FIFO i (the one peer i writes into) starts in a segment: after the doorbell page. */
static size_t fifo_offset(const shm_state *st, int i) {
  return WEFT__SHM_SEG_HEADER + (size_t)i * st->fifo_bytes;
}

/* Maps a FIFO's counters, slot headers and LL buffers into this process now, so the first
 * small messages do not each take a page fault: the 64 LL buffers span 32 pages per
 * direction, and 2-rank all-reduce 8 B read 1.2-1.6 us in the first timed loop of a
 * process (500 calls) against 0.2 after, 3 rounds of 3. The payload slots are left to
 * fault in when a large message first uses them, so memory no message needs stays
 * unallocated. Best effort: older kernels lack MADV_POPULATE_WRITE (Linux 5.14). */
static void populate(void *addr, size_t len) {
#ifdef MADV_POPULATE_WRITE
  (void)madvise(addr, len, MADV_POPULATE_WRITE);
#else
  (void)addr, (void)len;
#endif
}

static void populate_small_paths(const weft__shm_fifo *f) {
  populate(f->ctrl, weft__shm_fifo_payload_offset(f->nslots));
  populate(f->ll, (size_t)WEFT__SHM_LL_BUFS * WEFT__SHM_LL_LINES * WEFT__SHM_LINE);
}

/* Step 1's local half: segment and listening socket. A failure is recorded, not returned,
 * so this rank still joins the all-gather and its peers fail fast instead of timing out. */
static weft_status_t prepare_local(struct weft_comm *comm, shm_state *st) {
  if (!st->peers || !st->remote || !st->conns || !st->out_fds || !st->in_fds)
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: shm setup: out of memory", comm->rank);
  WEFT_TRY(read_settings(comm, &st->nslots, &st->slot_bytes, &st->cma_bytes));
  WEFT_TRY(weft__proto_config(comm, &st->ll_on, &st->ll_max));
  st->nt_mode = weft__shm_nt_mode();
  st->probe = ((uint64_t)getpid() << 32 ^ weft__now_ns() ^ (uint64_t)(uintptr_t)st) | 1;
  if (st->npeers == 0) return WEFT_SUCCESS;
  st->fifo_bytes = weft__shm_fifo_bytes(st->nslots, st->slot_bytes);
  char name[64];
  snprintf(name, sizeof name, "weft-shm-rank%d", comm->rank);
  size_t seg_bytes = WEFT__SHM_SEG_HEADER + st->fifo_bytes * (size_t)st->npeers;
  if (weft__shm_segment_create(&st->own, name, seg_bytes) != 0)
    return weft__error(comm, WEFT_ERR_SYSTEM,
                       "rank %d: shm setup: creating a %zu-byte memfd segment: %s", comm->rank,
                       seg_bytes, strerror(errno));
  for (int i = 0; i < st->npeers; i++) {
    weft__shm_fifo_attach(&st->conns[i].in, (char *)st->own.base + fifo_offset(st, i),
                          st->nslots, st->slot_bytes);
    populate_small_paths(&st->conns[i].in);
  }
  populate(st->own.base, WEFT__SHM_SEG_HEADER); /* the doorbell */
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
                     .nslots = st->nslots, .slot_bytes = st->slot_bytes,
                     .probe_addr = (uint64_t)(uintptr_t)&st->probe, .probe_value = st->probe};
    if (weft__shm_sock_send(st->out_fds[i], &hello, sizeof hello, -1, deadline) != 0)
      return sock_failed(comm, what);
  }
  return WEFT_SUCCESS;
}

/* The process at the other end of a setup socket (the one that connected, or the one that
 * listened) must be the one the bootstrap told us about. */
static weft_status_t check_peer_cred(struct weft_comm *comm, int fd, int peer, pid_t *pid) {
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (pid) *pid = 0;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return WEFT_SUCCESS;
  if (pid) *pid = cred.pid;
  if (cred.uid == getuid() && (comm->peers[peer].pid <= 0 || cred.pid == comm->peers[peer].pid))
    return WEFT_SUCCESS;
  return weft__error(comm, WEFT_ERR_AUTH,
                     "rank %d: shm setup: a connection claiming to be peer %d belongs to pid %d "
                     "uid %d, expected pid %d", comm->rank, peer, (int)cred.pid, (int)cred.uid,
                     (int)comm->peers[peer].pid);
}

/* Whether we can read process pid's memory: its probe word, announced in hello m, must
 * come back with the right value (a pid of another namespace could name another process). */
static int cma_probe(pid_t pid, const shm_msg *m) {
  uint64_t got = 0;
  struct iovec local = {&got, sizeof got};
  struct iovec remote = {(void *)(uintptr_t)m->probe_addr, sizeof got};
  if (pid <= 0) return ESRCH;
  ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (n < 0) return errno;
  return n == (ssize_t)sizeof got && got == m->probe_value ? 0 : EIO;
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
  shm_conn *sc = &st->conns[i];
  WEFT_TRY(check_peer_cred(comm, fd, m.rank, &sc->pid));
  if (st->cma_bytes > 0) sc->cma_errno = cma_probe(sc->pid, &m);
  sc->cma_recv = st->cma_bytes > 0 && sc->cma_errno == 0;
  shm_msg answer = {.magic = SHM_MAGIC, .rank = comm->rank, .to = m.rank,
                    .nslots = st->nslots, .slot_bytes = st->slot_bytes,
                    .fifo_offset = fifo_offset(st, i), .seg_bytes = st->own.bytes,
                    .cma_bytes = sc->cma_recv ? st->cma_bytes : 0,
                    .ll_max = st->ll_max, .ll_on = (uint64_t)st->ll_on};
  sc->ll_recv_on = st->ll_on;
  sc->ll_recv_max = st->ll_max;
  sc->ll_recv_seq = 1;
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
  weft_status_t s = check_peer_cred(comm, st->out_fds[i], peer, NULL);
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
  populate_small_paths(&st->conns[i].out);
  populate(st->remote[i].base, WEFT__SHM_SEG_HEADER); /* its doorbell */
  shm_conn *sc = &st->conns[i];
  sc->cma_send_bytes = m.cma_bytes;
  sc->scratch = &st->scratch;
  sc->ll_send_on = m.ll_on != 0;
  sc->ll_send_max = m.ll_max;
  sc->ll_send_seq = 1;
  sc->peer_bell = (weft__shm_doorbell *)st->remote[i].base;
  sc->nt_mode = st->nt_mode;
  sc->nt_out = st->nt_mode == WEFT__SHM_NT_ALWAYS;
  return WEFT_SUCCESS;
}

/* One info line naming the peers whose memory the kernel would not let us read. */
static void log_cma_refused(struct weft_comm *comm, const shm_state *st) {
  char list[256];
  size_t at = 0;
  int err = 0;
  list[0] = '\0';
  for (int i = 0; i < st->npeers && at + 16 < sizeof list; i++) {
    if (st->conns[i].cma_errno == 0) continue;
    err = st->conns[i].cma_errno;
    at += (size_t)snprintf(list + at, sizeof list - at, " %d", st->peers[i]);
  }
  if (err != 0)
    WEFT_INFO("shm: CMA not permitted between rank %d and peer(s)%s (%s%s); messages from them "
              "use the two-copy path", comm->rank, list, strerror(err),
              err == EPERM ? ": ptrace_scope or seccomp?" : "");
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
    WEFT_INFO("shm: connected to %d peers, %zu slots of %zu bytes per direction, single copy "
              "from %zu bytes", npeers, st->nslots, st->slot_bytes, st->cma_bytes);
  log_cma_refused(comm, st);
  return WEFT_SUCCESS;
}

/* LL is tried first, so a message small enough for LL never goes single copy; nor does
 * one in memory with no host view (the peer's process_vm_readv needs a host address). */
static int cma_eligible(const shm_conn *sc, const weft__req *r) {
  return sc->cma_send_bytes > 0 && r->bytes >= sc->cma_send_bytes && r->src != NULL &&
         !weft__shm_ll_send_eligible(sc, r) && r->mem->host_view(r->mem, r->src, r->bytes) != NULL;
}

/* Single-copy send. Each message is one descriptor slot; its request completes when the
 * receiver's head passes that slot. Descriptors go out for r and for the eligible requests
 * queued behind it, as far as slots allow, so the receiver reads message after message
 * without waiting for us to be scheduled (the chain and ring algorithms queue up to 8).
 * The cma_posted requests from the queue's head own the FIFO's last cma_posted slots;
 * the head's is at tail - cma_posted. A failed operation breaks the communicator, so this
 * count never outlives its requests into a later operation. */
static weft_status_t cma_send_progress(shm_conn *sc, weft__req *r, int *progressed) {
  weft__shm_fifo *f = &sc->out;
  if (sc->cma_posted > 0) {
    sc->head_seen = atomic_load_explicit(&f->ctrl->head, memory_order_acquire);
    if (sc->head_seen > sc->tail - sc->cma_posted) {
      sc->cma_posted--;
      r->done = r->bytes;
      r->complete = 1;
      *progressed = 1;
    }
  }
  weft__req *q = r->complete ? r->next : r;
  for (uint64_t skip = sc->cma_posted; q != NULL && skip > 0; skip--) q = q->next;
  for (; q != NULL && cma_eligible(sc, q); q = q->next) {
    if (sc->tail - sc->head_seen >= f->nslots) {
      sc->head_seen = atomic_load_explicit(&f->ctrl->head, memory_order_acquire);
      if (sc->tail - sc->head_seen >= f->nslots) break;
    }
    weft__shm_slot_hdr *h = weft__shm_fifo_hdr(f, sc->tail);
    h->msg_bytes = q->bytes;
    h->bytes = WEFT__SHM_CMA_SLOT;
    h->cma_src = (uint64_t)(uintptr_t)q->mem->host_view(q->mem, q->src, q->bytes);
    atomic_store_explicit(&f->ctrl->tail, ++sc->tail, memory_order_release);
    sc->cma_posted++;
    *progressed = 1;
    weft__shm_ring(sc->peer_bell);
  }
  return WEFT_SUCCESS;
}

/* Fills free slots with the next pieces of r. */
static weft_status_t shm_send_progress(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                       int *progressed) {
  shm_conn *sc = c->priv;
  weft__shm_fifo *f = &sc->out;
  if (r->complete) return WEFT_SUCCESS;
  if (sc->cma_posted == 0 && weft__shm_ll_send_eligible(sc, r))
    return weft__shm_ll_send_progress(comm, c, r, progressed);
  if (sc->cma_posted > 0 || cma_eligible(sc, r)) return cma_send_progress(sc, r, progressed);
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
    char *slot = weft__shm_fifo_data(f, h, sc->tail, r->bytes);
    /* Past the cache across L3s (shm_placement.h). The space skips an empty message, which
     * may come with a NULL buffer, and its bytes are in the slot before tail says so. */
    unsigned flags = sc->nt_out && r->bytes >= WEFT__SHM_NT_MIN ? WEFT__MEM_NT : 0;
    weft__mem_copy(r->mem, slot, (const char *)r->src + r->done, n, flags);
    weft__mem_publish(r->mem, flags);
    atomic_store_explicit(&f->ctrl->tail, ++sc->tail, memory_order_release);
    weft__shm_ring(sc->peer_bell);
    r->done += n;
    *progressed = 1;
    if (r->done == r->bytes) {
      r->complete = 1;
      return WEFT_SUCCESS;
    }
  }
}

/* Reads n bytes at the peer's address src into dst; 0, or an errno (EIO: the peer's
 * buffer ended early). */
static int cma_read(pid_t pid, void *dst, uint64_t src, size_t n) {
  while (n > 0) {
    struct iovec local = {dst, n};
    struct iovec remote = {(void *)(uintptr_t)src, n};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno;
    if (got == 0) return EIO;
    dst = (char *)dst + got;
    src += (uint64_t)got;
    n -= (size_t)got;
  }
  return 0;
}

static weft_status_t cma_failed(struct weft_comm *comm, weft__conn *c, const shm_conn *sc,
                                int err) {
  if (err == ESRCH)
    return weft__error(comm, WEFT_ERR_REMOTE,
                       "rank %d: recv from peer %d: the peer's process %d is gone (single-copy "
                       "read: %s)", comm->rank, c->peer, (int)sc->pid, strerror(err));
  return weft__error(comm, err == EFAULT || err == EIO ? WEFT_ERR_REMOTE : WEFT_ERR_SYSTEM,
                     "rank %d: recv from peer %d: single-copy read of the peer's buffer "
                     "(process %d) failed: %s", comm->rank, c->peer, (int)sc->pid, strerror(err));
}

/* Reads up to SHM_CMA_CALL_BYTES more of the message described by h out of the sender,
 * straight into r->dst, or through the scratch when reducing; releases the slot after the
 * last byte, which completes the sender's request. */
static weft_status_t cma_recv_progress(struct weft_comm *comm, weft__conn *c, shm_conn *sc,
                                       weft__req *r, const weft__shm_slot_hdr *h,
                                       int *progressed) {
  if (!sc->cma_recv)
    return weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: recv from peer %d: the peer sent a "
                       "single-copy message though single copy is off", comm->rank, c->peer);
  /* Straight into the destination when its space has a host view; else, and when
   * reducing, through the scratch and the space. */
  char *view = r->acc == NULL ? r->mem->host_view(r->mem, r->dst, r->bytes) : NULL;
  if (view == NULL && *sc->scratch == NULL &&
      (*sc->scratch = aligned_alloc(WEFT__SHM_PAGE, SHM_CMA_REDUCE_PIECE)) == NULL)
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: recv from peer %d: out of memory",
                       comm->rank, c->peer);
  size_t budget = SHM_CMA_CALL_BYTES;
  while (r->done < r->bytes && budget > 0) {
    size_t n = r->bytes - r->done < budget ? r->bytes - r->done : budget;
    size_t piece = view == NULL ? SHM_CMA_REDUCE_PIECE : SHM_CMA_PIECE;
    if (n > piece) n = piece;
    void *to = view == NULL ? *sc->scratch : view + r->done;
    int err = cma_read(sc->pid, to, h->cma_src + r->done, n);
    if (err != 0) return cma_failed(comm, c, sc, err);
    if (view == NULL) weft__req_deliver(r, to, n);
    else r->done += n;
    budget -= n;
  }
  *progressed = 1;
  if (r->done < r->bytes) return WEFT_SUCCESS;
  atomic_store_explicit(&sc->in.ctrl->head, ++sc->head, memory_order_release);
  weft__shm_ring(sc->peer_bell);
  r->complete = 1;
  return WEFT_SUCCESS;
}

/* The bulk FIFO is empty where r waits: if an LL message came instead, the peer sent one
 * of another size. Looks at the FIFO once more after seeing LL data, since a bulk message
 * sent before that LL one must be visible now. */
static weft_status_t check_ll_instead(struct weft_comm *comm, weft__conn *c, shm_conn *sc,
                                      const weft__req *r) {
  if (!sc->ll_recv_on || !weft__shm_ll_arrived(sc)) return WEFT_SUCCESS;
  sc->tail_seen = atomic_load_explicit(&sc->in.ctrl->tail, memory_order_acquire);
  if (sc->tail_seen != sc->head) return WEFT_SUCCESS;
  const weft__shm_ll_line *line = weft__shm_ll_buf(&sc->in, sc->ll_recv_seq);
  uint64_t flag = atomic_load_explicit(&line->flag, memory_order_acquire);
  return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                     "rank %d: recv from peer %d: message size mismatch: peer sent %u bytes, "
                     "expected %zu", comm->rank, c->peer, (unsigned)(flag >> 32), r->bytes);
}

/* Hands every filled slot of r's message to r, straight out of shared memory. */
static weft_status_t shm_recv_progress(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                       int *progressed) {
  shm_conn *sc = c->priv;
  weft__shm_fifo *f = &sc->in;
  if (r->complete) return WEFT_SUCCESS;
  if (weft__shm_ll_recv_eligible(sc, r)) return weft__shm_ll_recv_progress(comm, c, r, progressed);
  for (;;) {
    if (sc->head == sc->tail_seen) {
      sc->tail_seen = atomic_load_explicit(&f->ctrl->tail, memory_order_acquire);
      if (sc->head != sc->tail_seen) continue;
      if (r->done == 0 && weft__shm_cross_check_due(sc)) return check_ll_instead(comm, c, sc, r);
      return WEFT_SUCCESS;
    }
    weft__shm_slot_hdr *h = weft__shm_fifo_hdr(f, sc->head);
    size_t n = h->bytes;
    if (h->msg_bytes != r->bytes)
      return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                         "rank %d: recv from peer %d: message size mismatch: peer sent %zu bytes, "
                         "expected %zu", comm->rank, c->peer, (size_t)h->msg_bytes, r->bytes);
    if (h->bytes == WEFT__SHM_CMA_SLOT) return cma_recv_progress(comm, c, sc, r, h, progressed);
    if (n > f->slot_bytes || n > r->bytes - r->done)
      return weft__error(comm, WEFT_ERR_INTERNAL,
                         "rank %d: recv from peer %d: corrupt shm slot (%zu bytes)", comm->rank,
                         c->peer, n);
    weft__req_deliver(r, weft__shm_fifo_data(f, h, sc->head, r->bytes), n);
    atomic_store_explicit(&f->ctrl->head, ++sc->head, memory_order_release);
    weft__shm_ring(sc->peer_bell);
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
  free(st->scratch);
  free(st);
}

/* This rank's doorbell (the first line of its segment), or NULL without shm peers. */
static weft__shm_doorbell *own_bell(struct weft_comm *comm) {
  shm_state *st = comm->transport_state[WEFT__TRANSPORT_SHM];
  return st != NULL && st->own.base != NULL ? (weft__shm_doorbell *)st->own.base : NULL;
}

int weft__shm_sleep_begin(struct weft_comm *comm, uint32_t *bell) {
  weft__shm_doorbell *d = own_bell(comm);
  if (d == NULL) return 0;
  atomic_store_explicit(&d->sleeping, 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_seq_cst); /* announce before the caller looks once more */
  *bell = atomic_load_explicit(&d->bell, memory_order_acquire);
  return 1;
}

void weft__shm_sleep(struct weft_comm *comm, uint32_t bell, uint64_t max_ns) {
  weft__shm_doorbell *d = own_bell(comm);
  if (d != NULL) weft__futex_wait(&d->bell, bell, max_ns);
}

void weft__shm_sleep_end(struct weft_comm *comm) {
  weft__shm_doorbell *d = own_bell(comm);
  if (d != NULL) atomic_store_explicit(&d->sleeping, 0, memory_order_relaxed);
}

const weft__transport weft__transport_shm = {
    .name = "shm",
    .setup = shm_setup,
    .send_progress = shm_send_progress,
    .recv_progress = shm_recv_progress,
    .poll_fds = NULL,
    .teardown = shm_teardown,
};

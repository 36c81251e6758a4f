/* shm_setup.c: how the shm transport connects its peers (transports/transport.h's listen,
 * connect and close), without ever waiting for one.
 *
 * Each rank owns one memfd segment holding its inbound FIFOs, one per shm peer (layout in
 * shm_fifo.h).
 *   listen   create the segment and listen on an abstract socket named by a keyed hash of
 *            the comm's secret and our rank (never the secret: the name is world-readable
 *            in /proc/net/unix); the card says (ok, nslots, slot_bytes, a random nonce), so
 *            once the core has all-gathered the cards every listener exists and every rank
 *            knows whether the settings agree.
 *   connect  each call does what it can, and says what it still waits for:
 *            a. connect to every peer and send a hello (rank, settings, CMA probe word); a
 *               connect to a listening Unix socket completes from the backlog;
 *            b. accept peers, and once a hello is there check it: its MAC (lib/siphash.h)
 *               under the secret and our nonce, else the connection is dropped with a
 *               warning, as is the oldest silent one when more than WEFT__SHM_STRAYS
 *               wait (a process that read the name cannot hold setup up); then the
 *               peer's pid (SO_PEERCRED); answer with our segment's fd (SCM_RIGHTS), the
 *               offset of the FIFO that peer writes into, and a MAC under its nonce;
 *            c. read each answer on our outgoing connections, check its MAC, and map the
 *               peer's segment;
 *            d. when all is done, close every socket and fd: only the mappings remain, and
 *               the kernel frees a segment when its last mapping goes, whether ranks exit
 *               cleanly or die. /dev/shm is unused.
 *            Setup messages are SOCK_SEQPACKET: one arrives whole or not at all, so a look
 *            with no wait (deadline 0) never leaves half a message behind.
 * CMA: the kernel may forbid it (Yama ptrace_scope, seccomp in containers, other pid
 * namespaces), so in b the accepting rank reads a random probe word whose address and
 * value came in the connecting rank's hello; its answer carries the threshold the
 * connecting rank must use for messages to it (0 when the probe failed: two copies, with
 * one info line). The receiving rank's setting and probe thus decide for each direction.
 * Environment: WEFT_SHM_NSLOTS (default 8) and WEFT_SHM_SLOT_BYTES (default 256K, a
 * multiple of 64) must be set the same on every rank; setup fails naming the rank that
 * differs. WEFT_SHM_CMA_BYTES (default 8K; 0: off) is the single-copy threshold;
 * WEFT_SHM_SLEEP_MAX_US bounds one doorbell sleep (shm_doorbell.h); WEFT_SHM_MEMBARRIER=0
 * keeps the doorbell's fences on the send path (shm_membarrier.h); WEFT_SHM_PREFETCH
 * caps the lines a sender prefetches for writing after each message (default 32; 0: none;
 * weft__shm_prefetch_write in shm_conn.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/proto.h"
#include "lib/siphash.h"
#include "lib/status.h"
#include "topo/topo.h"
#include "transports/shm/shm_ll.h"
#include "transports/shm/shm_membarrier.h"
#include "transports/shm/shm_placement.h"
#include "transports/shm/shm_state.h"

#define SHM_DEFAULT_NSLOTS 64
#define SHM_DEFAULT_SLOT_BYTES (32u * 1024u)
#define SHM_OVERSUB_NSLOTS 8 /* more ranks than cores: weft__shm_default_geometry */
#define SHM_OVERSUB_SLOT_BYTES (128u * 1024u)
/* Lines a sender prefetches for its next message (WEFT_SHM_PREFETCH), default and most: an
 * LL chunk's 32 lines, or 2 KiB of FIFO payload (4 KiB and more measured no faster). */
#define SHM_DEFAULT_PREFETCH_LINES WEFT__SHM_LL_LINES
#define SHM_MAX_NSLOTS 4096
#define SHM_MIN_SLOT_BYTES 64u
#define SHM_MAX_SLOT_BYTES (1ull << 30)
#define SHM_MAGIC 0x4d485357u /* "WSHM" */
#define SHM_SEND_NS 1000000000ull /* a setup message to a fresh socket: sent at once, or broken */
/* From 8 KiB, for the messages the core wants on one copy (weft__req_single_copy_wanted:
 * all-gather and all-to-all(v), where every rank sends and receives at once; below 64 KiB
 * only some of those, lib/req.c has the figures). Was 64 KiB; 4 KiB gained nothing over 8
 * (2 ranks, 5 launches, us, 4K / 8K: all-gather 16K 2.54 / 2.70, 64K 4.81 / 4.79;
 * all-to-all 16K 2.48 / 2.16, 64K 4.88 / 4.43). On an earlier
 * 2-core VM process_vm_readv copied at 11-13 GB/s from cache and 3-5 GB/s from DRAM against
 * memcpy's 47 and 7-13, and the two-copy path, whose two copies run in parallel on two
 * cores, won 2-rank broadcast and all-reduce at every size from 128 KiB to 32 MiB (busbw
 * 10-18 GB/s against 5-12, medians of 3): those stay on two copies. */
#define SHM_DEFAULT_CMA_BYTES (8u * 1024u)
#define SHM_SLEEP_MAX_NS 1000000ull /* one doorbell sleep: bounds a missed ring (shm_doorbell.h) */

typedef weft__shm_state shm_state;
typedef weft__shm_conn shm_conn;
typedef weft__shm_card shm_card;

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
  uint64_t mac;                     /* weft__mac of the message (this field 0) and the
                                       receiver's nonce: the sender knows the secret */
} shm_msg;

/* Seals m for the rank whose card carried nonce. */
static void seal(struct weft_comm *comm, shm_msg *m, const uint8_t nonce[16]) {
  m->mac = 0;
  m->mac = weft__mac(comm->secret, m, sizeof *m, nonce);
}

/* Whether m was sealed for us (our nonce) by a holder of the secret. */
static int sealed_for_us(struct weft_comm *comm, const shm_state *st, const shm_msg *m) {
  shm_msg c = *m;
  c.mac = 0;
  return weft__mac_equal(m->mac, weft__mac(comm->secret, &c, sizeof c, st->nonce));
}

/* Same host in the system view (which WEFT_HOSTID and WEFT_TOPO_FILE shape): ranks that
 * can map each other's memfds. Preferred there over any network. */
int weft__shm_can_connect(const weft__topo_system *topo, int a, int b) {
  return topo->ranks[a].host == topo->ranks[b].host ? 100 : 0;
}

void weft__shm_default_geometry(int oversubscribed, size_t *nslots, size_t *slot_bytes) {
  *nslots = oversubscribed ? SHM_OVERSUB_NSLOTS : SHM_DEFAULT_NSLOTS;
  *slot_bytes = oversubscribed ? SHM_OVERSUB_SLOT_BYTES : SHM_DEFAULT_SLOT_BYTES;
}

static weft_status_t read_settings(struct weft_comm *comm, size_t *nslots, size_t *slot_bytes,
                                   size_t *cma_bytes, int *cma_all) {
  *cma_bytes = weft__env_size("WEFT_SHM_CMA_BYTES", SHM_DEFAULT_CMA_BYTES);
  const char *calls = weft__env_str("WEFT_SHM_CMA_CALLS", "auto");
  if (strcmp(calls, "auto") != 0 && strcmp(calls, "all") != 0 && strcmp(calls, "put") != 0)
    return weft__error(comm, WEFT_ERR_INVALID_ARGUMENT,
                       "rank %d: shm setup: WEFT_SHM_CMA_CALLS=%s must be auto, all or put", comm->rank, calls);
  *cma_all = strcmp(calls, "all") == 0 ? 1 : strcmp(calls, "put") == 0 ? 2 : 0;
  size_t default_n, default_s;
  weft__shm_default_geometry(comm->oversubscribed, &default_n, &default_s);
  long n = weft__env_long("WEFT_SHM_NSLOTS", (long)default_n);
  size_t s = weft__env_size("WEFT_SHM_SLOT_BYTES", default_s);
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
  st->accepted = calloc(n + WEFT__SHM_STRAYS, sizeof *st->accepted);
  st->nonces = calloc(n, sizeof *st->nonces);
  if (!st->peers || !st->remote || !st->conns || !st->out_fds || !st->in_fds || !st->accepted ||
      !st->nonces)
    return st;
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
  for (int k = 0; st->accepted && k < st->naccepted; k++) close_fd(&st->accepted[k]);
  st->naccepted = 0;
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
/* The pages of the small-message paths (counters, headers, LL), written by both processes
 * at setup (weft__shm_prefault's why). No race: the receiver writes its FIFO before any
 * peer can map the segment, the sender before its first message, and until messages flow
 * the receiver writes nothing in it (head and ll_done move only on receipt, the probe line
 * only in a probe, which both ends enter). The payload slots are written on first use
 * (shm.c), so a pair that only ever exchanges small messages commits no payload memory. */
static void populate_small_paths(const weft__shm_fifo *f) {
  weft__shm_prefault(f->ctrl, weft__shm_fifo_payload_offset(f->nslots), 1);
  weft__shm_prefault(f->ll, (size_t)WEFT__SHM_LL_BUFS * WEFT__SHM_LL_LINES * WEFT__SHM_LINE, 1);
}

/* Whether this CPU can prefetch a line for writing (weft__shm_prefetch_write): on x86-64
 * when it has PREFETCHW (CPUID 0x80000001 ECX bit 8, Linux's "3dnowprefetch"); elsewhere
 * always (the compiler's write prefetch is a hint any CPU may ignore). */
#if defined(__x86_64__)
static int cpu_prefetches_for_write(void) {
  unsigned a, b, c, d;
  return __get_cpuid(0x80000001u, &a, &b, &c, &d) && (c & (1u << 8)) != 0;
}
#else
static int cpu_prefetches_for_write(void) { return 1; }
#endif

/* The local half of setup: settings, segment and listening socket. */
static weft_status_t prepare_local(struct weft_comm *comm, shm_state *st) {
  if (!st->peers || !st->remote || !st->conns || !st->out_fds || !st->in_fds || !st->accepted || !st->nonces)
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: shm setup: out of memory", comm->rank);
  if (getrandom(st->nonce, sizeof st->nonce, 0) != (ssize_t)sizeof st->nonce)
    return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: shm setup: getrandom: %s", comm->rank, strerror(errno));
  WEFT_TRY(read_settings(comm, &st->nslots, &st->slot_bytes, &st->cma_bytes, &st->cma_all));
  WEFT_TRY(weft__proto_config(comm, &st->ll_on, &st->ll_max));
  long us = weft__env_long("WEFT_SHM_SLEEP_MAX_US", (long)(SHM_SLEEP_MAX_NS / 1000));
  st->sleep_max_ns = us > 0 ? (uint64_t)us * 1000 : SHM_SLEEP_MAX_NS;
  st->nt_mode = weft__shm_nt_mode();
  st->copy_probe_on = weft__env_long("WEFT_SHM_COPY_PROBE", 1) != 0;
  long lines = weft__env_long("WEFT_SHM_PREFETCH", SHM_DEFAULT_PREFETCH_LINES);
  if (lines > SHM_DEFAULT_PREFETCH_LINES) lines = SHM_DEFAULT_PREFETCH_LINES;
  st->prefetch_lines = cpu_prefetches_for_write() && lines > 0 ? (int)lines : 0;
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
  weft__shm_prefault(st->own.base, WEFT__SHM_SEG_HEADER, 0); /* the doorbell */
  /* Before any peer can map the segment: it reads the flag once, when it does. Not with more
   * ranks than cores: there ranks sleep often and each sleep's membarrier interrupts the
   * CPUs of the running ranks, which measured 5-30% slower on 4 ranks on 2 cores. */
  st->membarrier = weft__env_long("WEFT_SHM_MEMBARRIER", 1) != 0 && !comm->oversubscribed &&
                   weft__shm_membarrier_register();
  ((weft__shm_doorbell *)st->own.base)->membarrier = (uint32_t)st->membarrier;
  WEFT_INFO("rank %d: shm doorbell: %s", comm->rank,
            st->membarrier ? "membarrier before a sleep, sends to such peers without a fence"
                           : "fences on both sides (membarrier unavailable, more ranks than cores, "
                             "or WEFT_SHM_MEMBARRIER=0)");
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

weft_status_t weft__shm_listen(struct weft_comm *comm, const int *peers, int npeers, void *card) {
  shm_card *me = card;
  memset(me, 0, sizeof *me);
  shm_state *st = state_new(peers, npeers);
  if (!st) return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: shm setup: out of memory", comm->rank);
  comm->transport_state[weft__transport_index(&weft__transport_shm)] = st;
  weft_status_t s = prepare_local(comm, st);
  *me = (shm_card){.ok = s == WEFT_SUCCESS, .nslots = st->nslots, .slot_bytes = st->slot_bytes};
  memcpy(me->nonce, st->nonce, sizeof me->nonce);
  return s;
}

/* Every peer got as far as listening and uses the same settings. */
static weft_status_t check_cards(struct weft_comm *comm, shm_state *st, const void *const *cards) {
  for (int i = 0; i < st->npeers; i++) {
    const shm_card *p = cards[st->peers[i]];
    if (!p->ok)
      return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: shm setup: peer %d failed to prepare its shared memory",
                         comm->rank, st->peers[i]);
    if (p->nslots != st->nslots || p->slot_bytes != st->slot_bytes)
      return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                         "rank %d: shm setup: peer %d uses WEFT_SHM_NSLOTS=%llu "
                         "WEFT_SHM_SLOT_BYTES=%llu but this rank %zu and %zu; set them the same "
                         "on every rank", comm->rank, st->peers[i], (unsigned long long)p->nslots,
                         (unsigned long long)p->slot_bytes, st->nslots, st->slot_bytes);
    memcpy(st->nonces[i], p->nonce, sizeof st->nonces[i]);
  }
  return WEFT_SUCCESS;
}

static weft_status_t sock_failed(struct weft_comm *comm, const char *what) {
  if (errno == ECONNRESET || errno == ECONNREFUSED || errno == EPIPE)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: shm setup: %s: the peer closed the connection",
                       comm->rank, what);
  return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: shm setup: %s: %s", comm->rank, what,
                     strerror(errno));
}

/* One setup message on fd if it has come: 1 with *m filled, 0 when not yet, or an error
 * (st < 0 path: *status set). */
static int try_recv(struct weft_comm *comm, int fd, shm_msg *m, int *got_fd, const char *what,
                    weft_status_t *status) {
  *status = WEFT_SUCCESS;
  if (weft__shm_sock_recv(fd, m, sizeof *m, got_fd, 0) != 0) {
    if (errno == ETIMEDOUT) return 0;
    *status = sock_failed(comm, what);
    return 0;
  }
  if (m->magic != SHM_MAGIC || m->to != comm->rank) {
    if (got_fd && *got_fd >= 0) close_fd(got_fd);
    *status = weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: shm setup: %s: malformed message", comm->rank, what);
    return 0;
  }
  return 1;
}

/* a: connect to every peer not yet connected and say who we are. */
static weft_status_t connect_peers(struct weft_comm *comm, shm_state *st) {
  char what[64];
  for (int i = 0; i < st->npeers; i++) {
    if (st->out_fds[i] >= 0) continue;
    int peer = st->peers[i];
    snprintf(what, sizeof what, "connecting to peer %d", peer);
    int fd = weft__shm_sock_connect(comm->secret, peer, 0);
    if (fd < 0 && errno == ETIMEDOUT) continue; /* its backlog is full: next pass */
    if (fd < 0) return sock_failed(comm, what);
    st->out_fds[i] = fd;
    shm_msg hello = {.magic = SHM_MAGIC, .rank = comm->rank, .to = peer,
                     .nslots = st->nslots, .slot_bytes = st->slot_bytes,
                     .probe_addr = (uint64_t)(uintptr_t)&st->probe, .probe_value = st->probe};
    seal(comm, &hello, st->nonces[i]);
    if (weft__shm_sock_send(fd, &hello, sizeof hello, -1, weft__now_ns() + SHM_SEND_NS) != 0)
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

/* b, one peer whose hello m came on fd: check it, answer with our segment. */
static weft_status_t answer(struct weft_comm *comm, shm_state *st, int fd, const shm_msg *m) {
  int i = peer_index(st, m->rank);
  if (i < 0 || st->in_fds[i] >= 0) {
    close(fd);
    return weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: shm setup: unexpected connection from rank %d",
                       comm->rank, m->rank);
  }
  st->in_fds[i] = fd;
  if (m->nslots != st->nslots || m->slot_bytes != st->slot_bytes)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE,
                       "rank %d: shm setup: peer %d uses WEFT_SHM_NSLOTS=%llu WEFT_SHM_SLOT_BYTES=%llu "
                       "but this rank %zu and %zu; set them the same on every rank", comm->rank,
                       m->rank, (unsigned long long)m->nslots, (unsigned long long)m->slot_bytes,
                       st->nslots, st->slot_bytes);
  shm_conn *sc = &st->conns[i];
  WEFT_TRY(check_peer_cred(comm, fd, m->rank, &sc->pid));
  if (st->cma_bytes > 0) sc->cma_errno = cma_probe(sc->pid, m);
  sc->cma_recv = st->cma_bytes > 0 && sc->cma_errno == 0;
  shm_msg a = {.magic = SHM_MAGIC, .rank = comm->rank, .to = m->rank,
               .nslots = st->nslots, .slot_bytes = st->slot_bytes,
               .fifo_offset = fifo_offset(st, i), .seg_bytes = st->own.bytes,
               .cma_bytes = sc->cma_recv ? st->cma_bytes : 0,
               .ll_max = st->ll_max, .ll_on = (uint64_t)st->ll_on};
  seal(comm, &a, st->nonces[i]);
  sc->ll_recv_on = st->ll_on;
  sc->ll_recv_max = st->ll_max;
  sc->ll_recv_seq = 1;
  char what[64];
  snprintf(what, sizeof what, "sending the segment to peer %d", m->rank);
  if (weft__shm_sock_send(fd, &a, sizeof a, st->own.fd, weft__now_ns() + SHM_SEND_NS) != 0)
    return sock_failed(comm, what);
  st->nanswered++;
  return WEFT_SUCCESS;
}

/* b: one accepted connection's hello: 1 when a genuine one came (in *m), 0 when nothing came
 * yet, -1 when the connection is to be dropped: closed, or a hello that does not prove the
 * secret (a process that found our socket's name; it must not fail or hold up setup). */
static int recv_hello(struct weft_comm *comm, const shm_state *st, int fd, shm_msg *m) {
  if (weft__shm_sock_recv(fd, m, sizeof *m, NULL, 0) != 0) return errno == ETIMEDOUT ? 0 : -1;
  if (m->magic == SHM_MAGIC && m->to == comm->rank && sealed_for_us(comm, st, m)) return 1;
  WEFT_WARN("rank %d: shm setup: dropped a connection whose hello does not prove this "
            "communicator's secret (another job, or a process that read the socket's name?)", comm->rank);
  return -1;
}

static void forget_accepted(shm_state *st, int k) {
  memmove(&st->accepted[k], &st->accepted[k + 1], (size_t)(st->naccepted - k - 1) * sizeof *st->accepted);
  st->naccepted--;
}

/* b: accept what is waiting, and answer every genuine hello that has come. */
static weft_status_t accept_peers(struct weft_comm *comm, shm_state *st) {
  int fd;
  if (st->listen_fd < 0) return WEFT_SUCCESS; /* no shm peers */
  while ((fd = weft__shm_sock_accept(st->listen_fd, 0)) >= 0) {
    if (st->naccepted == st->npeers + WEFT__SHM_STRAYS) { /* the oldest silent one goes */
      close(st->accepted[0]);
      forget_accepted(st, 0);
    }
    st->accepted[st->naccepted++] = fd;
  }
  if (errno != ETIMEDOUT) return sock_failed(comm, "accepting a peer");
  for (int k = 0; k < st->naccepted;) {
    shm_msg m;
    int got = recv_hello(comm, st, st->accepted[k], &m);
    if (got == 0) {
      k++;
      continue;
    }
    fd = st->accepted[k];
    forget_accepted(st, k);
    if (got < 0) close(fd);
    else WEFT_TRY(answer(comm, st, fd, &m));
  }
  return WEFT_SUCCESS;
}

/* c, one peer whose answer m (with its segment's fd) came: map its segment. */
static weft_status_t map_peer(struct weft_comm *comm, shm_state *st, int i, const shm_msg *m, int seg_fd) {
  int peer = st->peers[i];
  weft_status_t s = check_peer_cred(comm, st->out_fds[i], peer, NULL);
  if (s != WEFT_SUCCESS) {
    close_fd(&seg_fd);
    return s;
  }
  if (!sealed_for_us(comm, st, m)) {
    close_fd(&seg_fd);
    return weft__error(comm, WEFT_ERR_AUTH, "rank %d: shm setup: the answer on our connection to peer %d "
                       "does not prove the communicator's secret", comm->rank, peer);
  }
  if (m->rank != peer || seg_fd < 0 || m->fifo_offset + st->fifo_bytes > m->seg_bytes) {
    close_fd(&seg_fd);
    return weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: shm setup: receiving the segment of peer %d: "
                       "malformed answer", comm->rank, peer);
  }
  if (weft__shm_segment_map_fd(&st->remote[i], seg_fd, m->seg_bytes) != 0)
    return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: shm setup: mapping the segment of peer %d: %s",
                       comm->rank, peer, strerror(errno));
  weft__shm_fifo_attach(&st->conns[i].out, (char *)st->remote[i].base + m->fifo_offset,
                        st->nslots, st->slot_bytes);
  populate_small_paths(&st->conns[i].out);
  weft__shm_prefault(st->remote[i].base, WEFT__SHM_SEG_HEADER, 0); /* its doorbell */
  shm_conn *sc = &st->conns[i];
  sc->cma_send_bytes = m->cma_bytes;
  sc->cma_all = st->cma_all;
  sc->scratch = &st->scratch;
  sc->ll_send_on = m->ll_on != 0;
  sc->ll_send_max = m->ll_max;
  sc->ll_send_seq = 1;
  sc->prefetch_lines = st->prefetch_lines;
  sc->peer_bell = (weft__shm_doorbell *)st->remote[i].base;
  sc->ring_fence = !(st->membarrier && sc->peer_bell->membarrier);
  sc->nt_mode = st->nt_mode;
  sc->nt_out = st->nt_mode == WEFT__SHM_NT_ALWAYS;
  st->nmapped++;
  return WEFT_SUCCESS;
}

/* c: map every peer whose answer has come. */
static weft_status_t map_peers(struct weft_comm *comm, shm_state *st) {
  for (int i = 0; i < st->npeers; i++) {
    if (st->out_fds[i] < 0 || st->remote[i].base != NULL) continue;
    char what[64];
    snprintf(what, sizeof what, "receiving the segment of peer %d", st->peers[i]);
    shm_msg m;
    int seg_fd = -1;
    weft_status_t s;
    if (try_recv(comm, st->out_fds[i], &m, &seg_fd, what, &s)) WEFT_TRY(map_peer(comm, st, i, &m, seg_fd));
    else if (s != WEFT_SUCCESS) return s;
  }
  return WEFT_SUCCESS;
}

/* "peers 2 5 to connect, the segments of peers 3" for a timeout message. */
static void describe_waiting(const shm_state *st, char *buf, size_t len) {
  size_t at = (size_t)snprintf(buf, len, "peers");
  for (int i = 0; i < st->npeers && at + 16 < len; i++)
    if (st->in_fds[i] < 0) at += (size_t)snprintf(buf + at, len - at, " %d", st->peers[i]);
  at += (size_t)snprintf(buf + at, len - at, " to connect; segments of peers");
  for (int i = 0; i < st->npeers && at + 16 < len; i++)
    if (st->remote[i].base == NULL) at += (size_t)snprintf(buf + at, len - at, " %d", st->peers[i]);
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

weft_status_t weft__shm_connect(struct weft_comm *comm, const void *const *cards, char *waiting, size_t len) {
  shm_state *st = weft__shm_state_of(comm);
  if (!st->checked) {
    WEFT_TRY(check_cards(comm, st, cards));
    st->checked = 1;
  }
  WEFT_TRY(connect_peers(comm, st));
  WEFT_TRY(accept_peers(comm, st));
  WEFT_TRY(map_peers(comm, st));
  if (st->nanswered < st->npeers || st->nmapped < st->npeers) {
    describe_waiting(st, waiting, len);
    return WEFT_IN_PROGRESS;
  }
  close_setup_fds(st);
  for (int i = 0; i < st->npeers; i++) comm->conns[st->peers[i]].priv = &st->conns[i];
  if (st->npeers > 0)
    WEFT_INFO("shm: connected to %d peers, %zu slots of %zu bytes per direction, single copy "
              "from %zu bytes", st->npeers, st->nslots, st->slot_bytes, st->cma_bytes);
  log_cma_refused(comm, st);
  return WEFT_SUCCESS;
}

void weft__shm_close(struct weft_comm *comm) {
  int slot = weft__transport_index(&weft__transport_shm);
  shm_state *st = comm->transport_state[slot];
  if (!st) return;
  comm->transport_state[slot] = NULL;
  close_setup_fds(st);
  for (int i = 0; st->peers && st->conns && i < st->npeers; i++) {
    weft__conn *c = &comm->conns[st->peers[i]];
    if (c->priv == &st->conns[i]) c->priv = NULL;
  }
  for (int i = 0; st->remote && i < st->npeers; i++) weft__shm_segment_release(&st->remote[i]);
  weft__shm_segment_release(&st->own);
  free(st->peers);
  free(st->remote);
  free(st->conns);
  free(st->out_fds);
  free(st->in_fds);
  free(st->accepted);
  free(st->nonces);
  free(st->scratch);
  free(st->copy_probe_buf);
  free(st);
}

/* socket_setup.c: how the socket transport connects its peers (transports/transport.h's
 * listen, connect and close), without ever waiting for one.
 *
 * listen: a rank with socket peers listens on the interface sockutil picks (or the NIC
 * beside its NUMA node, topo/comm_topo.c); its card carries that address and its framing
 * settings, so once the core has all-gathered the cards every rank has every other's
 * address. connect, for a pair a < b: a opens NSOCKS connections to b (WEFT_SOCKET_NSOCKS,
 * default 2) and sends on each a hello {magic, a, socket index, NSOCKS, b, MAC}; b
 * accepts, and once a hello has come checks its MAC (lib/siphash.h: under the comm's
 * secret and the random nonce of b's card, so the secret never crosses the wire and a
 * hello recorded for another communicator does not verify), files the socket under
 * (a, index) and answers an ack MAC'd with a's nonce; a reads and checks its acks. Each call does what it can: a connect
 * completes in the peer's listen backlog (one round trip), a hello or an ack is read only
 * once poll says it is there, so no rank waits on one that is itself waiting, and the whole
 * mesh forms in about one round trip. A stray connection that never says hello stays
 * pending without holding setup up (the oldest is closed when more than PENDING_EXTRA
 * strays wait); one whose hello does not verify is dropped with a warning. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/siphash.h"
#include "lib/sockutil.h"
#include "lib/status.h"
#include "topo/topo.h"
#include "transports/socket/socket_state.h"

#define STEP_NS 200000000ull /* one blocking step (a connect, a small message): 0.2 s at most */

/* Any pair of ranks: TCP reaches across hosts, and within one when nothing better does. */
int weft__socket_can_connect(const weft__topo_system *topo, int a, int b) { return 10; }

static sock_peer *peer_new(int peer, int nsocks, size_t split) {
  sock_peer *sp = calloc(1, sizeof *sp);
  if (sp == NULL) return NULL;
  sp->peer = peer;
  sp->nsocks = nsocks;
  sp->split = split;
  for (int i = 0; i < MAX_SOCKS; i++) sp->fd[i] = -1;
  return sp;
}

static void peer_free(sock_peer *sp) {
  if (sp == NULL) return;
  for (int i = 0; i < MAX_SOCKS; i++) {
    if (sp->fd[i] >= 0) close(sp->fd[i]);
    free(sp->stage[i]);
  }
  free(sp);
}

/* Each rank's card: listening (only with socket peers) and its framing settings. */
static weft_status_t make_card(struct weft_comm *comm, sock_state *st, int npeers,
                               sock_card *card) {
  card->ok = 1;
  memcpy(card->nonce, st->nonce, sizeof card->nonce);
  card->nsocks = st->nsocks;
  card->split = st->split;
  if (npeers == 0) return WEFT_SUCCESS;
  char ifname[64] = "";
  /* Without WEFT_SOCKET_IFNAME, the topology's NIC beside this rank's NUMA node when the
   * host has several (topo/comm_topo.c); else the usual first usable interface. */
  weft_status_t s = WEFT_SUCCESS;
  if (weft__env_str("WEFT_SOCKET_IFNAME", NULL) != NULL ||
      weft__topo_pick_nic(comm, ifname, sizeof ifname, &card->addr) != 0)
    s = weft__sockaddr_pick_local(&card->addr, ifname, sizeof ifname);
  if (s != WEFT_SUCCESS) {
    char why[512];
    snprintf(why, sizeof why, "%s", weft__thread_last_error());
    card->ok = 0;
    return weft__error(comm, s, "rank %d: socket setup: %s", comm->rank, why);
  }
  st->listen_fd = weft__sock_listen(&card->addr, 4096);
  if (st->listen_fd < 0) {
    card->ok = 0;
    return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: socket setup: cannot listen on "
                       "interface %s: %s", comm->rank, ifname, strerror(errno));
  }
  char buf[96];
  WEFT_INFO("rank %d: socket transport listens on %s (%s)", comm->rank,
            weft__sockaddr_str(&card->addr, buf, sizeof buf), ifname);
  return WEFT_SUCCESS;
}

static weft_status_t state_new(struct weft_comm *comm, const int *peers, int npeers, sock_state **out) {
  sock_state *st = calloc(1, sizeof *st);
  if (st == NULL || (st->by_rank = calloc((size_t)comm->nranks, sizeof(sock_peer *))) == NULL ||
      (st->peer_nonce = calloc((size_t)comm->nranks, sizeof *st->peer_nonce)) == NULL) {
    if (st != NULL) free(st->by_rank);
    free(st);
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: socket setup: out of memory", comm->rank);
  }
  comm->transport_state[weft__transport_index(&weft__transport_socket)] = st;
  *out = st;
  st->nranks = comm->nranks;
  st->listen_fd = -1;
  if (getrandom(st->nonce, sizeof st->nonce, 0) != (ssize_t)sizeof st->nonce)
    return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: socket setup: getrandom: %s", comm->rank, strerror(errno));
  /* 2 measured best on loopback (2 cores): 16 MiB all-reduce busbw 2.3-3.2 GB/s with 2
   * sockets, 2.2-2.9 with 1, 1.5-2.4 with 4. Between hosts, striping also spreads flows. */
  long n = weft__env_long("WEFT_SOCKET_NSOCKS", 2);
  if (n < 1 || n > MAX_SOCKS) {
    WEFT_WARN("WEFT_SOCKET_NSOCKS=%ld is outside 1..%d; using 2", n, MAX_SOCKS);
    n = 2;
  }
  st->nsocks = (int)n;
  st->split = weft__env_size("WEFT_SOCKET_SPLIT_BYTES", 256 * 1024);
  st->buffer_auto = weft__env_str("WEFT_SOCKET_BUFFER_BYTES", NULL) == NULL; /* weft__socket_rcvbuf */
  /* Below 64 KiB a buffer stalls every transfer on ACK round trips (4096 made a 256 KiB
   * all-reduce take 9.7 s on loopback): refused rather than obeyed. */
  weft_status_t s = weft__env_size_in("WEFT_SOCKET_BUFFER_BYTES", 0, 64 * 1024, 1u << 30, 1, &st->buffer_bytes);
  if (s != WEFT_SUCCESS) {
    char why[256];
    snprintf(why, sizeof why, "%s", weft__thread_last_error());
    return weft__error(comm, s, "rank %d: socket setup: %s", comm->rank, why);
  }
  for (int i = 0; i < npeers; i++) {
    int p = peers[i];
    if (p < 0 || p >= comm->nranks || p == comm->rank || st->by_rank[p] != NULL) continue;
    if ((st->by_rank[p] = peer_new(p, st->nsocks, st->split)) == NULL)
      return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: socket setup: out of memory", comm->rank);
    if (p < comm->rank) st->incoming += st->nsocks;
  }
  st->pending = calloc((size_t)st->incoming + PENDING_EXTRA, sizeof *st->pending);
  if (st->pending == NULL)
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: socket setup: out of memory", comm->rank);
  return WEFT_SUCCESS;
}

weft_status_t weft__socket_listen(struct weft_comm *comm, const int *peers, int npeers, void *card) {
  sock_card *me = card;
  memset(me, 0, sizeof *me);
  sock_state *st = NULL;
  WEFT_TRY(state_new(comm, peers, npeers, &st));
  /* A rank that cannot listen still publishes its card (ok 0): its peers fail at once. */
  return make_card(comm, st, npeers, me);
}

static weft_status_t check_card(struct weft_comm *comm, const sock_state *st, int p,
                                const sock_card *card) {
  if (!card->ok)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: socket setup: peer %d could not "
                       "open its listening socket (see that rank's error)", comm->rank, p);
  if (card->nsocks != st->nsocks)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: socket setup: peer %d has "
                       "WEFT_SOCKET_NSOCKS=%d, this rank %d: every rank must set the same",
                       comm->rank, p, (int)card->nsocks, st->nsocks);
  if (card->split != st->split)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: socket setup: peer %d uses "
                       "WEFT_SOCKET_SPLIT_BYTES=%zu, this rank %zu: every rank must use the "
                       "same", comm->rank, p, (size_t)card->split, st->split);
  return WEFT_SUCCESS;
}

/* 1 when fd has something to read now. */
static int readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

/* Opens socket idx to higher peer sp and sends its hello; the ack is read later. 0 with
 * nothing done when its connect did not complete in one step (the next call retries). */
static weft_status_t connect_one(struct weft_comm *comm, sock_peer *sp, int idx, const sock_card *card) {
  const weft__sockaddr *addr = &card->addr;
  char buf[96];
  int fd = weft__sock_connect(addr, weft__now_ns() + STEP_NS);
  if (fd < 0 && errno == ETIMEDOUT) return WEFT_SUCCESS;
  if (fd < 0)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: socket setup: connect to peer %d at %s failed: %s",
                       comm->rank, sp->peer, weft__sockaddr_str(addr, buf, sizeof buf), strerror(errno));
  sp->fd[idx] = fd;
  sock_hello h = {.magic = HELLO_MAGIC, .rank = comm->rank, .index = idx, .nsocks = sp->nsocks, .to = sp->peer};
  h.mac = weft__mac(comm->secret, &h, sizeof h, card->nonce);
  if (weft__sock_send_all(fd, &h, sizeof h, weft__now_ns() + STEP_NS) != 0)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: socket setup: hello to peer %d "
                       "failed: %s", comm->rank, sp->peer, strerror(errno));
  return WEFT_SUCCESS;
}

/* Whether hello h was made for this rank (our nonce) by a holder of the secret. */
static int hello_ok(struct weft_comm *comm, const sock_state *st, const sock_hello *h) {
  sock_hello c = *h;
  c.mac = 0;
  return h->magic == HELLO_MAGIC && h->to == comm->rank &&
         weft__mac_equal(h->mac, weft__mac(comm->secret, &c, sizeof c, st->nonce));
}

/* Checks a pending socket's hello (it has bytes to read) and files it under its peer; a
 * connection that is not one of ours is closed with a warning, a real mismatch is an error. */
static weft_status_t file_accepted(struct weft_comm *comm, sock_state *st, int fd) {
  sock_hello h;
  if (weft__sock_recv_all(fd, &h, sizeof h, weft__now_ns() + STEP_NS) != 0 || !hello_ok(comm, st, &h)) {
    WEFT_WARN("rank %d: socket setup: dropped a connection without this communicator's "
              "hello (another job or a stray client?)", comm->rank);
    close(fd);
    return WEFT_SUCCESS;
  }
  int p = h.rank;
  sock_peer *sp = (p >= 0 && p < comm->rank) ? st->by_rank[p] : NULL;
  if (sp != NULL && h.nsocks != sp->nsocks) {
    close(fd);
    return weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: socket setup: peer %d opens "
                       "%d sockets per peer, this rank expects %d (WEFT_SOCKET_NSOCKS)",
                       comm->rank, p, (int)h.nsocks, sp->nsocks);
  }
  if (sp == NULL || h.index < 0 || h.index >= sp->nsocks || sp->fd[h.index] >= 0) {
    close(fd);
    return weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: socket setup: unexpected "
                       "connection from rank %d (socket %d): do all ranks agree on which "
                       "peers use sockets?", comm->rank, p, (int)h.index);
  }
  sp->fd[h.index] = fd;
  st->filed++;
  sock_ack a = {.magic = ACK_MAGIC, .rank = comm->rank, .status = 0, .index = h.index, .to = p};
  a.mac = weft__mac(comm->secret, &a, sizeof a, st->peer_nonce[p]);
  if (weft__sock_send_all(fd, &a, sizeof a, weft__now_ns() + STEP_NS) != 0)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: socket setup: ack to peer %d failed: "
                       "%s", comm->rank, p, strerror(errno));
  return WEFT_SUCCESS;
}

/* Accepts what waits in the backlog, and files every pending socket whose hello came. */
static weft_status_t accept_some(struct weft_comm *comm, sock_state *st) {
  int fd;
  while ((fd = weft__sock_accept(st->listen_fd, 0)) >= 0) {
    if (st->npending == st->incoming + PENDING_EXTRA) { /* the oldest silent one goes */
      close(st->pending[0]);
      memmove(&st->pending[0], &st->pending[1], (size_t)(--st->npending) * sizeof *st->pending);
    }
    st->pending[st->npending++] = fd;
  }
  if (errno != ETIMEDOUT)
    return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: socket setup: accept failed: %s", comm->rank,
                       strerror(errno));
  for (int k = 0; k < st->npending;) {
    if (!readable(st->pending[k])) {
      k++;
      continue;
    }
    fd = st->pending[k];
    memmove(&st->pending[k], &st->pending[k + 1], (size_t)(st->npending - k - 1) * sizeof *st->pending);
    st->npending--;
    WEFT_TRY(file_accepted(comm, st, fd));
  }
  return WEFT_SUCCESS;
}

static weft_status_t read_ack(struct weft_comm *comm, const sock_state *st, sock_peer *sp, int idx) {
  sock_ack a;
  if (weft__sock_recv_all(sp->fd[idx], &a, sizeof a, weft__now_ns() + STEP_NS) != 0)
    return weft__error(comm, errno == ETIMEDOUT ? WEFT_ERR_TIMEOUT : WEFT_ERR_REMOTE,
                       "rank %d: socket setup: no ack from peer %d: %s", comm->rank,
                       sp->peer, errno == ECONNRESET ? "peer closed the connection "
                       "(exited, failed or rejected our secret?)" : strerror(errno));
  sock_ack c = a;
  c.mac = 0;
  if (a.magic != ACK_MAGIC || a.rank != sp->peer || a.status != 0 || a.to != comm->rank || a.index != idx ||
      !weft__mac_equal(a.mac, weft__mac(comm->secret, &c, sizeof c, st->nonce)))
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: socket setup: peer %d answered with "
                       "a bad ack", comm->rank, sp->peer);
  sp->acked[idx] = 1;
  return WEFT_SUCCESS;
}

/* Connects and reads acks toward higher peers; returns how many sockets still lack their
 * ack in *open. */
static weft_status_t connect_up(struct weft_comm *comm, sock_state *st, const void *const *cards, int *open) {
  *open = 0;
  for (int p = comm->rank + 1; p < st->nranks; p++) {
    sock_peer *sp = st->by_rank[p];
    for (int i = 0; sp != NULL && i < sp->nsocks; i++) {
      if (sp->fd[i] < 0) WEFT_TRY(connect_one(comm, sp, i, cards[p]));
      if (sp->fd[i] >= 0 && !sp->acked[i] && readable(sp->fd[i])) WEFT_TRY(read_ack(comm, st, sp, i));
      *open += !sp->acked[i];
    }
  }
  return WEFT_SUCCESS;
}

size_t weft__socket_rcvbuf(const struct weft_comm *comm, const sock_state *st, int peer, size_t rmem_max) {
  if (!st->buffer_auto) return st->buffer_bytes;
  if (comm->peers[peer].host_hash != comm->peers[comm->rank].host_hash) return 0;
  return weft__sock_same_host_rcvbuf(rmem_max);
}

/* Data sockets never block; small messages must not wait for Nagle. */
static weft_status_t tune_fd(struct weft_comm *comm, const sock_state *st, sock_peer *sp, int fd,
                             size_t rmem_max) {
  if (weft__sock_set_nonblock(fd, 1) != 0 || weft__sock_set_nodelay(fd) != 0)
    return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: socket setup: socket options for "
                       "peer %d: %s", comm->rank, sp->peer, strerror(errno));
  /* A buffer set here turns off the kernel's autotuning of that buffer. */
  int sz = (int)st->buffer_bytes;
  if (sz > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  int rcv = (int)weft__socket_rcvbuf(comm, st, sp->peer, rmem_max);
  if (rcv > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
  return WEFT_SUCCESS;
}

/* "connections from peers 0, 2; acks from peers 5" for a timeout message. */
static void describe_waiting(const sock_state *st, int me, char *buf, size_t len) {
  size_t at = (size_t)snprintf(buf, len, "connections from peers");
  for (int p = 0; p < st->nranks && at + 16 < len; p++) {
    const sock_peer *sp = st->by_rank[p];
    for (int i = 0; sp != NULL && i < sp->nsocks; i++)
      if (p < me ? sp->fd[i] < 0 : !sp->acked[i]) {
        at += (size_t)snprintf(buf + at, len - at, " %d%s", p, p < me ? "" : " (ack)");
        break;
      }
  }
}

/* Closes the stray connections still pending and the listening socket. */
static void close_setup(sock_state *st) {
  for (int k = 0; st->pending != NULL && k < st->npending; k++) close(st->pending[k]);
  st->npending = 0;
  if (st->listen_fd >= 0) close(st->listen_fd);
  st->listen_fd = -1;
}

weft_status_t weft__socket_connect(struct weft_comm *comm, const void *const *cards, char *waiting, size_t len) {
  sock_state *st = weft__socket_state_of(comm);
  for (int p = 0; !st->checked && p < comm->nranks; p++)
    if (st->by_rank[p] != NULL) {
      WEFT_TRY(check_card(comm, st, p, cards[p]));
      memcpy(st->peer_nonce[p], ((const sock_card *)cards[p])->nonce, sizeof st->peer_nonce[p]);
    }
  st->checked = 1;
  int open;
  WEFT_TRY(connect_up(comm, st, cards, &open));
  if (st->filed < st->incoming) WEFT_TRY(accept_some(comm, st));
  if (open > 0 || st->filed < st->incoming) {
    describe_waiting(st, comm->rank, waiting, len);
    return WEFT_IN_PROGRESS;
  }
  close_setup(st);
  size_t rmem_max = st->buffer_auto ? weft__sock_rmem_max() : 0;
  for (int p = 0; p < st->nranks; p++) {
    sock_peer *sp = st->by_rank[p];
    for (int i = 0; sp != NULL && i < sp->nsocks; i++) WEFT_TRY(tune_fd(comm, st, sp, sp->fd[i], rmem_max));
    if (sp != NULL) comm->conns[p].priv = sp;
  }
  return WEFT_SUCCESS;
}

void weft__socket_close(struct weft_comm *comm) {
  int slot = weft__transport_index(&weft__transport_socket);
  sock_state *st = comm->transport_state[slot];
  if (st == NULL) return;
  close_setup(st);
  for (int p = 0; st->by_rank && p < st->nranks; p++) {
    if (comm->conns != NULL && comm->conns[p].priv == st->by_rank[p]) comm->conns[p].priv = NULL;
    peer_free(st->by_rank[p]);
  }
  free(st->by_rank);
  free(st->peer_nonce);
  free(st->pending);
  free(st);
  comm->transport_state[slot] = NULL;
}

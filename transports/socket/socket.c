/* socket.c: the TCP transport, used between hosts and, when WEFT_TRANSPORT=socket, within one.
 *
 * Connections. Every rank with socket peers listens on the interface sockutil picks, and the
 * all-gather of setup gives each rank every other's address. For a pair a < b, a opens NSOCKS
 * connections to b (WEFT_SOCKET_NSOCKS, default 2) and sends on each a hello {magic, the
 * comm's secret, a, socket index, NSOCKS}; b accepts, checks the secret, files the socket
 * under (a, index) and answers an ack. Every rank first connects upward, then accepts from
 * below, then reads its acks: a connect completes in the peer's listen backlog, so no rank
 * waits on one that is itself waiting, and the whole mesh forms in one round trip.
 *
 * Messages. A message of B bytes (0 is a real, empty message) travels as parts, each a
 * 16-byte header {B, part bytes} and the part's payload. Below WEFT_SOCKET_SPLIT_BYTES
 * (default 256 KiB) there is one part, on socket 0, written with one sendmsg and read with
 * one recvmsg (header and payload in two iovecs), which keeps the 8-byte latency at one
 * system call per side. Larger messages are cut into NSOCKS parts on 16-byte boundaries (so
 * a part holds whole elements of every datatype) that move on sockets 0..NSOCKS-1 side by
 * side, as Open MPI's TCP BTL stripes over its links and NCCL's socket transport over its
 * NCCL_NSOCKS_PERTHREAD sockets. The receiver knows B, computes the same cut, and checks
 * each header, so a size mismatch between the two ranks is reported, not misread.
 *
 * Bytes moved: B + 16 * parts per message. User buffers are reached only through their
 * memory space (mem/space.h): the kernel reads and writes them at the space's host view. A
 * plain receive lands straight in the destination's host view (one copy, the kernel's); a
 * receive that reduces (dst = acc op incoming), or whose memory has no host view, lands in
 * a per-socket staging buffer of STAGE_BYTES and reaches the destination from there through
 * the space (weft__req_land), whole elements only, each part at its own offset. A send
 * needs a host view (device memory would be staged by the core first).
 *
 * Nothing here blocks after setup: sends and receives use MSG_DONTWAIT, EAGAIN means no
 * progress, and poll_fds hands the waiting rank the sockets of the messages in flight. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "lib/bootstrap.h"
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/sockutil.h"
#include "lib/status.h"
#include "mem/space.h"
#include "topo/topo.h"
#include "transports/transport.h"

enum { MAX_SOCKS = 16, STAGE_BYTES = 256 * 1024, SLICE_MS = 200 };
#define HELLO_MAGIC 0x4b434f5354464557ull /* "WEFTSOCK" little-endian */
#define ACK_MAGIC 0x4b43414b54464557ull   /* "WEFTKACK" */

/* What each rank tells the others in setup's all-gather. */
typedef struct {
  int32_t ok;        /* 0 when this rank could not listen (then every peer fails clearly) */
  int32_t nsocks;
  uint64_t split;    /* WEFT_SOCKET_SPLIT_BYTES: both sides must cut messages alike */
  weft__sockaddr addr;
} sock_card;

typedef struct {
  uint64_t magic;
  uint8_t secret[16];
  int32_t rank, index, nsocks, pad;
} sock_hello;

typedef struct {
  uint64_t magic;
  int32_t rank, status;
} sock_ack;

typedef struct {
  uint64_t total, part; /* message bytes, this part's bytes */
} wire_hdr;

/* One part of the message in flight in one direction. */
typedef struct {
  size_t off, len;      /* the part's slice of the message */
  size_t moved;         /* payload bytes sent, or received (into dst or staging) */
  size_t delivered;     /* receive with reduce: payload bytes reduced into dst */
  size_t hdr_moved;
  wire_hdr hdr;
  int done;
} sock_part;

typedef struct {
  weft__req *req;       /* the request the parts belong to; NULL between messages */
  size_t done;          /* req->done as this transfer left it */
  int nparts, left;
  sock_part part[MAX_SOCKS];
} sock_xfer;

typedef struct {
  int peer, nsocks;
  size_t split;
  int fd[MAX_SOCKS];
  weft_status_t dead;   /* an earlier error broke the byte stream: every later call fails */
  sock_xfer send, recv;
  uint8_t *stage[MAX_SOCKS];
  size_t fill[MAX_SOCKS]; /* staged bytes not yet reduced (less than one element) */
} sock_peer;

typedef struct {
  int nranks, listen_fd, nsocks;
  size_t split;
  sock_peer **by_rank;  /* [nranks]; NULL for ranks not reached over sockets */
} sock_state;

/* ---------------------------------------------------------------------------------------
 * Errors */

static int is_remote_errno(int e) {
  return e == ECONNRESET || e == EPIPE || e == ECONNABORTED || e == ETIMEDOUT ||
         e == EHOSTUNREACH || e == ENETUNREACH || e == ENETDOWN || e == EHOSTDOWN;
}

/* A send or receive failed with errno e (0: the peer closed): the stream is unusable. */
static weft_status_t sock_fail(struct weft_comm *comm, sock_peer *sp, const char *op, int e) {
  if (e == 0 || e == ECONNRESET || e == EPIPE)
    sp->dead = weft__error(comm, WEFT_ERR_REMOTE,
                           "rank %d: socket to peer %d: peer closed the connection "
                           "(exited or failed?)", comm->rank, sp->peer);
  else if (is_remote_errno(e))
    sp->dead = weft__error(comm, WEFT_ERR_REMOTE, "rank %d: socket to peer %d: %s: "
                           "connection lost: %s", comm->rank, sp->peer, op, strerror(e));
  else
    sp->dead = weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: socket to peer %d: %s failed: %s",
                           comm->rank, sp->peer, op, strerror(e));
  return sp->dead;
}

static weft_status_t sock_dead(struct weft_comm *comm, sock_peer *sp) {
  return weft__error(comm, sp->dead, "rank %d: socket to peer %d: connection unusable after "
                     "an earlier error", comm->rank, sp->peer);
}

/* ---------------------------------------------------------------------------------------
 * Message framing, shared by sender and receiver so both cut a message alike. */

static int plan_nparts(const sock_peer *sp, size_t bytes) {
  return (bytes < sp->split || sp->nsocks == 1) ? 1 : sp->nsocks;
}

static void xfer_start(sock_xfer *x, const sock_peer *sp, weft__req *r) {
  int n = plan_nparts(sp, r->bytes);
  size_t chunk = ((r->bytes + (size_t)n - 1) / (size_t)n + 15) & ~(size_t)15;
  memset(x, 0, sizeof *x);
  x->req = r;
  x->nparts = x->left = n;
  for (int i = 0; i < n; i++) {
    sock_part *p = &x->part[i];
    p->off = (size_t)i * chunk < r->bytes ? (size_t)i * chunk : r->bytes;
    p->len = r->bytes - p->off < chunk ? r->bytes - p->off : chunk;
    p->hdr.total = r->bytes;
    p->hdr.part = p->len;
  }
  r->done = 0;
}

static void part_finish(sock_xfer *x, sock_part *p, weft__req *r) {
  p->done = 1;
  if (--x->left > 0) return;
  r->complete = 1;
  x->req = NULL;
}

/* Accounts k bytes that moved over header then payload. */
static size_t part_account(sock_part *p, size_t k) {
  size_t h = 16 - p->hdr_moved < k ? 16 - p->hdr_moved : k;
  p->hdr_moved += h;
  p->moved += k - h;
  return k - h;
}

/* Finds r's transfer, starting one for a new message. If the engine dropped a message after
 * some of it moved (an error or abort elsewhere), the byte stream is left mid-message and
 * nothing later on this connection can be framed. */
static weft_status_t xfer_for(struct weft_comm *comm, sock_peer *sp, sock_xfer *x,
                              weft__req *r, const char *op) {
  if (x->req == r && r->done == x->done) return WEFT_SUCCESS;
  for (int i = 0; x->req != NULL && i < x->nparts; i++)
    if (x->part[i].hdr_moved > 0) {
      sp->dead = weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: socket to peer %d: a "
                             "%s was abandoned mid-message; the connection is unusable",
                             comm->rank, sp->peer, op);
      return sp->dead;
    }
  xfer_start(x, sp, r);
  return WEFT_SUCCESS;
}

/* ---------------------------------------------------------------------------------------
 * Sending */

/* Writes what the socket takes of part p; returns at EAGAIN or when the part is done. */
static weft_status_t send_part(struct weft_comm *comm, sock_peer *sp, sock_xfer *x, int i,
                               int *progressed) {
  sock_part *p = &x->part[i];
  weft__req *r = x->req;
  const char *src = r->bytes > 0 ? r->mem->host_view(r->mem, r->src, r->bytes) : NULL;
  if (src == NULL && r->bytes > 0)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: send to peer %d: the socket "
                       "transport needs host-accessible memory; %s memory has no host view",
                       comm->rank, sp->peer, r->mem->name);
  while (!p->done) {
    struct iovec iov[2];
    int n = 0;
    size_t want = 0;
    if (p->hdr_moved < 16)
      iov[n++] = (struct iovec){(char *)&p->hdr + p->hdr_moved, 16 - p->hdr_moved};
    if (p->moved < p->len)
      iov[n++] = (struct iovec){(char *)src + p->off + p->moved, p->len - p->moved};
    for (int j = 0; j < n; j++) want += iov[j].iov_len;
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t k = sendmsg(sp->fd[i], &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return WEFT_SUCCESS;
      return sock_fail(comm, sp, "send", errno);
    }
    *progressed = 1;
    r->done += part_account(p, (size_t)k);
    if (p->hdr_moved == 16 && p->moved == p->len) part_finish(x, p, r);
    else if ((size_t)k < want) return WEFT_SUCCESS; /* the socket buffer is full */
  }
  return WEFT_SUCCESS;
}

static weft_status_t sock_send_progress(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                        int *progressed) {
  sock_peer *sp = c->priv;
  if (sp->dead) return sock_dead(comm, sp);
  sock_xfer *x = &sp->send;
  WEFT_TRY(xfer_for(comm, sp, x, r, "send"));
  int n = x->nparts;
  for (int i = 0; i < n && x->req == r; i++)
    if (!x->part[i].done) WEFT_TRY(send_part(comm, sp, x, i, progressed));
  x->done = r->done;
  return WEFT_SUCCESS;
}

/* ---------------------------------------------------------------------------------------
 * Receiving */

static weft_status_t check_header(struct weft_comm *comm, sock_peer *sp, const sock_part *p,
                                  const weft__req *r) {
  if (p->hdr.total != r->bytes) {
    sp->dead = weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: recv from peer %d: message "
                           "size mismatch: peer sent %zu bytes, expected %zu", comm->rank,
                           sp->peer, (size_t)p->hdr.total, r->bytes);
    return sp->dead;
  }
  if (p->hdr.part != p->len) {
    sp->dead = weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: recv from peer %d: message of "
                           "%zu bytes cut differently by the peer (part of %zu bytes, "
                           "expected %zu): corrupted stream?", comm->rank, sp->peer,
                           r->bytes, (size_t)p->hdr.part, p->len);
    return sp->dead;
  }
  return WEFT_SUCCESS;
}

/* Hands the whole elements staged for part i to r at the part's offset (weft__req_land:
 * reduced or copied through r's space); keeps the tail of a split element for the next
 * read. r->done counts delivered bytes. */
static void deliver_staged(sock_peer *sp, sock_part *p, int i, weft__req *r) {
  size_t esz = weft__dtype_size(r->dtype);
  if (esz == 0) esz = 1; /* the caller validated the datatype; never divide by zero */
  size_t n = sp->fill[i] - sp->fill[i] % esz;
  if (n == 0) return;
  weft__req_land(r, p->off + p->delivered, sp->stage[i], n);
  p->delivered += n;
  r->done += n;
  sp->fill[i] -= n;
  if (sp->fill[i] > 0) memmove(sp->stage[i], sp->stage[i] + n, sp->fill[i]);
}

/* Where a receive's payload lands: the destination's host view when it copies and has
 * one, else NULL (staged). */
static char *recv_view(const weft__req *r) {
  return r->acc == NULL && r->bytes > 0 ? r->mem->host_view(r->mem, r->dst, r->bytes) : NULL;
}

/* One recvmsg for part i: header remainder, then payload into dst's host view (copy) or
 * staging (reduce, or no host view). Returns 1 in *more when the read filled all it asked
 * for. */
static weft_status_t recv_once(struct weft_comm *comm, sock_peer *sp, sock_xfer *x, int i,
                               int *progressed, int *more) {
  sock_part *p = &x->part[i];
  weft__req *r = x->req;
  char *view = recv_view(r);
  struct iovec iov[2];
  int n = 0;
  size_t want = 0;
  *more = 0;
  if (p->hdr_moved < 16)
    iov[n++] = (struct iovec){(char *)&p->hdr + p->hdr_moved, 16 - p->hdr_moved};
  if (p->moved < p->len && view != NULL) {
    iov[n++] = (struct iovec){view + p->off + p->moved, p->len - p->moved};
  } else if (p->moved < p->len) {
    size_t room = STAGE_BYTES - sp->fill[i], left = p->len - p->moved;
    iov[n++] = (struct iovec){sp->stage[i] + sp->fill[i], room < left ? room : left};
  }
  for (int j = 0; j < n; j++) want += iov[j].iov_len;
  struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
  ssize_t k = recvmsg(sp->fd[i], &m, MSG_DONTWAIT);
  if (k < 0) {
    if (errno == EINTR) { *more = 1; return WEFT_SUCCESS; }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return WEFT_SUCCESS;
    return sock_fail(comm, sp, "recv", errno);
  }
  if (k == 0) return sock_fail(comm, sp, "recv", 0);
  *progressed = 1;
  int had_hdr = p->hdr_moved == 16;
  size_t payload = part_account(p, (size_t)k);
  if (!had_hdr && p->hdr_moved == 16) WEFT_TRY(check_header(comm, sp, p, r));
  if (view != NULL) {
    r->done += payload;
  } else {
    sp->fill[i] += payload;
    deliver_staged(sp, p, i, r);
  }
  *more = (size_t)k == want;
  return WEFT_SUCCESS;
}

static weft_status_t recv_part(struct weft_comm *comm, sock_peer *sp, sock_xfer *x, int i,
                               int *progressed) {
  sock_part *p = &x->part[i];
  weft__req *r = x->req;
  if (r->bytes > 0 && recv_view(r) == NULL && sp->stage[i] == NULL) {
    sp->stage[i] = malloc(STAGE_BYTES);
    if (sp->stage[i] == NULL)
      return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: recv from peer %d: no memory "
                         "for a %d-byte staging buffer", comm->rank, sp->peer, STAGE_BYTES);
  }
  int more = 1;
  while (more && !p->done) {
    WEFT_TRY(recv_once(comm, sp, x, i, progressed, &more));
    if (p->hdr_moved == 16 && p->moved == p->len) part_finish(x, p, r);
  }
  return WEFT_SUCCESS;
}

static weft_status_t sock_recv_progress(struct weft_comm *comm, weft__conn *c, weft__req *r,
                                        int *progressed) {
  sock_peer *sp = c->priv;
  if (sp->dead) return sock_dead(comm, sp);
  sock_xfer *x = &sp->recv;
  if (x->req != r || r->done != x->done) {
    WEFT_TRY(xfer_for(comm, sp, x, r, "receive"));
    for (int i = 0; i < MAX_SOCKS; i++) sp->fill[i] = 0;
  }
  int n = x->nparts;
  for (int i = 0; i < n && x->req == r; i++)
    if (!x->part[i].done) WEFT_TRY(recv_part(comm, sp, x, i, progressed));
  x->done = r->done;
  return WEFT_SUCCESS;
}

/* ---------------------------------------------------------------------------------------
 * Waiting */

static int add_fd(struct pollfd *fds, int n, int max, int fd, short ev) {
  for (int i = 0; i < n; i++)
    if (fds[i].fd == fd) { fds[i].events |= ev; return n; }
  if (n == max) return n;
  fds[n] = (struct pollfd){.fd = fd, .events = ev, .revents = 0};
  return n + 1;
}

/* The sockets r still needs: those of its unfinished parts, or all it will use. */
static int add_xfer_fds(const sock_peer *sp, const sock_xfer *x, const weft__req *r,
                        short ev, struct pollfd *fds, int n, int max) {
  if (r == NULL) return n;
  int started = x->req == r;
  int parts = started ? x->nparts : plan_nparts(sp, r->bytes);
  for (int i = 0; i < parts; i++)
    if (!started || !x->part[i].done) n = add_fd(fds, n, max, sp->fd[i], ev);
  return n;
}

static int sock_poll_fds(weft__conn *c, struct pollfd *fds, int max) {
  const sock_peer *sp = c->priv;
  if (sp == NULL || max <= 0) return 0;
  int n = add_xfer_fds(sp, &sp->send, c->send_head, POLLOUT, fds, 0, max);
  return add_xfer_fds(sp, &sp->recv, c->recv_head, POLLIN, fds, n, max);
}

/* ---------------------------------------------------------------------------------------
 * Setup */

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
  memset(card, 0, sizeof *card);
  card->ok = 1;
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

static weft_status_t check_card(struct weft_comm *comm, const sock_state *st, int p,
                                const sock_card *card) {
  if (!card->ok)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: socket setup: peer %d could not "
                       "open its listening socket (see that rank's error)", comm->rank, p);
  if (card->nsocks != st->nsocks)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: socket setup: peer %d has "
                       "WEFT_SOCKET_NSOCKS=%d, this rank %d: every rank must set the same", comm->rank, p, (int)card->nsocks, st->nsocks);
  if (card->split != st->split)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: socket setup: peer %d uses "
                       "WEFT_SOCKET_SPLIT_BYTES=%zu, this rank %zu: every rank must use the "
                       "same", comm->rank, p, (size_t)card->split, st->split);
  return WEFT_SUCCESS;
}

/* Has the bootstrap heard of a failed rank? Checked between slices of a long wait. */
static weft_status_t check_peers_alive(struct weft_comm *comm, const char *what) {
  int failed = -2;
  const char *why = "";
  if (weft__bootstrap_check_failure(comm, &failed, &why) == WEFT_SUCCESS) return WEFT_SUCCESS;
  return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: socket setup: %s: rank %d failed (%s)",
                     comm->rank, what, failed, why ? why : "");
}

static uint64_t slice_end(uint64_t deadline) {
  uint64_t s = weft__now_ns() + (uint64_t)SLICE_MS * 1000000ull;
  return s < deadline ? s : deadline;
}

/* Opens socket idx to peer p and sends its hello; the ack is read later. */
static weft_status_t connect_one(struct weft_comm *comm, sock_peer *sp, int idx,
                                 const weft__sockaddr *addr, uint64_t deadline) {
  char buf[96];
  int fd;
  for (;;) {
    fd = weft__sock_connect(addr, slice_end(deadline));
    if (fd >= 0 || errno != ETIMEDOUT || weft__now_ns() >= deadline) break;
    WEFT_TRY(check_peers_alive(comm, "connecting"));
  }
  if (fd < 0)
    return weft__error(comm, errno == ETIMEDOUT ? WEFT_ERR_TIMEOUT : WEFT_ERR_REMOTE,
                       "rank %d: socket setup: connect to peer %d at %s failed: %s",
                       comm->rank, sp->peer, weft__sockaddr_str(addr, buf, sizeof buf),
                       strerror(errno));
  sp->fd[idx] = fd;
  sock_hello h = {.magic = HELLO_MAGIC, .rank = comm->rank, .index = idx,
                  .nsocks = sp->nsocks};
  memcpy(h.secret, comm->secret, 16);
  if (weft__sock_send_all(fd, &h, sizeof h, deadline) != 0)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: socket setup: hello to peer %d "
                       "failed: %s", comm->rank, sp->peer, strerror(errno));
  return WEFT_SUCCESS;
}

/* Names the lower peers whose sockets have not all arrived, for a timeout message. */
static void missing_peers(const sock_state *st, int me, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int p = 0; p < me && at + 16 < len; p++) {
    const sock_peer *sp = st->by_rank[p];
    if (sp == NULL) continue;
    for (int i = 0; i < sp->nsocks; i++)
      if (sp->fd[i] < 0) {
        at += (size_t)snprintf(buf + at, len - at, "%s%d", at ? ", " : "", p);
        break;
      }
  }
}

/* Checks an accepted socket's hello and files it under its peer; 1 when filed, 0 when the
 * connection was not one of ours (closed, warned), or an error for a real mismatch. */
static weft_status_t file_accepted(struct weft_comm *comm, sock_state *st, int fd,
                                   uint64_t deadline, int *filed) {
  sock_hello h;
  *filed = 0;
  /* A stray client that sends nothing must not hold setup for long. */
  uint64_t hello_by = weft__now_ns() + 5000000000ull;
  if (weft__sock_recv_all(fd, &h, sizeof h, hello_by < deadline ? hello_by : deadline) != 0 ||
      h.magic != HELLO_MAGIC || memcmp(h.secret, comm->secret, 16) != 0) {
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
  sock_ack a = {.magic = ACK_MAGIC, .rank = comm->rank, .status = 0};
  if (weft__sock_send_all(fd, &a, sizeof a, deadline) != 0)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: socket setup: ack to peer %d failed: "
                       "%s", comm->rank, p, strerror(errno));
  *filed = 1;
  return WEFT_SUCCESS;
}

static weft_status_t accept_all(struct weft_comm *comm, sock_state *st, int expected,
                                uint64_t deadline) {
  while (expected > 0) {
    int fd = weft__sock_accept(st->listen_fd, slice_end(deadline));
    if (fd < 0 && errno == ETIMEDOUT && weft__now_ns() < deadline) {
      WEFT_TRY(check_peers_alive(comm, "waiting for connections"));
      continue;
    }
    if (fd < 0 && errno == ETIMEDOUT) {
      char who[256];
      missing_peers(st, comm->rank, who, sizeof who);
      return weft__error(comm, WEFT_ERR_TIMEOUT, "rank %d: socket setup: timed out after %d "
                         "ms waiting for connections from peers %s", comm->rank,
                         comm->timeout_ms, who);
    }
    if (fd < 0)
      return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: socket setup: accept failed: %s",
                         comm->rank, strerror(errno));
    int filed;
    WEFT_TRY(file_accepted(comm, st, fd, deadline, &filed));
    expected -= filed;
  }
  return WEFT_SUCCESS;
}

static weft_status_t read_ack(struct weft_comm *comm, sock_peer *sp, int idx,
                              uint64_t deadline) {
  sock_ack a;
  if (weft__sock_recv_all(sp->fd[idx], &a, sizeof a, deadline) != 0)
    return weft__error(comm, errno == ETIMEDOUT ? WEFT_ERR_TIMEOUT : WEFT_ERR_REMOTE,
                       "rank %d: socket setup: no ack from peer %d: %s", comm->rank,
                       sp->peer, errno == ECONNRESET ? "peer closed the connection "
                       "(exited, failed or rejected our secret?)" : strerror(errno));
  if (a.magic != ACK_MAGIC || a.rank != sp->peer || a.status != 0)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: socket setup: peer %d answered with "
                       "a bad ack", comm->rank, sp->peer);
  return WEFT_SUCCESS;
}

/* Data sockets never block; small messages must not wait for Nagle. */
static weft_status_t tune_fd(struct weft_comm *comm, sock_peer *sp, int fd) {
  if (weft__sock_set_nonblock(fd, 1) != 0 || weft__sock_set_nodelay(fd) != 0)
    return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: socket setup: socket options for "
                       "peer %d: %s", comm->rank, sp->peer, strerror(errno));
  /* Fixed buffers turn off the kernel's autotuning; on loopback 4 MiB measured no better
   * (within noise), so they stay opt-in for long fat links. */
  int sz = (int)weft__env_size("WEFT_SOCKET_BUFFER_BYTES", 0);
  if (sz > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
  }
  return WEFT_SUCCESS;
}

static weft_status_t connect_mesh(struct weft_comm *comm, sock_state *st,
                                  const sock_card *cards, uint64_t deadline) {
  int incoming = 0;
  for (int p = 0; p < st->nranks; p++) {
    sock_peer *sp = st->by_rank[p];
    if (sp == NULL) continue;
    if (p < comm->rank) { incoming += sp->nsocks; continue; }
    for (int i = 0; i < sp->nsocks; i++) WEFT_TRY(connect_one(comm, sp, i, &cards[p].addr,
                                                              deadline));
  }
  WEFT_TRY(accept_all(comm, st, incoming, deadline));
  for (int p = comm->rank + 1; p < st->nranks; p++)
    for (int i = 0; st->by_rank[p] && i < st->by_rank[p]->nsocks; i++)
      WEFT_TRY(read_ack(comm, st->by_rank[p], i, deadline));
  for (int p = 0; p < st->nranks; p++)
    for (int i = 0; st->by_rank[p] && i < st->by_rank[p]->nsocks; i++)
      WEFT_TRY(tune_fd(comm, st->by_rank[p], st->by_rank[p]->fd[i]));
  return WEFT_SUCCESS;
}

static weft_status_t state_new(struct weft_comm *comm, const int *peers, int npeers,
                               sock_state **out) {
  sock_state *st = calloc(1, sizeof *st);
  if (st == NULL || (st->by_rank = calloc((size_t)comm->nranks, sizeof(sock_peer *))) == NULL) {
    free(st);
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: socket setup: out of memory",
                       comm->rank);
  }
  comm->transport_state[WEFT__TRANSPORT_SOCKET] = st;
  *out = st;
  st->nranks = comm->nranks;
  st->listen_fd = -1;
  /* 2 measured best on loopback (2 cores): 16 MiB all-reduce busbw 2.3-3.2 GB/s with 2
   * sockets, 2.2-2.9 with 1, 1.5-2.4 with 4. Between hosts, striping also spreads flows. */
  long n = weft__env_long("WEFT_SOCKET_NSOCKS", 2);
  if (n < 1 || n > MAX_SOCKS) {
    WEFT_WARN("WEFT_SOCKET_NSOCKS=%ld is outside 1..%d; using 2", n, MAX_SOCKS);
    n = 2;
  }
  st->nsocks = (int)n;
  st->split = weft__env_size("WEFT_SOCKET_SPLIT_BYTES", 256 * 1024);
  for (int i = 0; i < npeers; i++) {
    int p = peers[i];
    if (p < 0 || p >= comm->nranks || p == comm->rank || st->by_rank[p] != NULL) continue;
    if ((st->by_rank[p] = peer_new(p, st->nsocks, st->split)) == NULL)
      return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: socket setup: out of memory",
                         comm->rank);
  }
  return WEFT_SUCCESS;
}

static weft_status_t sock_setup(struct weft_comm *comm, const int *peers, int npeers) {
  uint64_t deadline = weft__deadline_after_ms(comm->timeout_ms);
  sock_state *st = NULL;
  sock_card mine;
  WEFT_TRY(state_new(comm, peers, npeers, &st));
  /* Even a rank that cannot listen takes part in the all-gather, so its peers fail at once
   * with a clear message instead of timing out. */
  weft_status_t local = make_card(comm, st, npeers, &mine);
  sock_card *cards = calloc((size_t)comm->nranks, sizeof *cards);
  if (cards == NULL)
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: socket setup: out of memory",
                       comm->rank);
  weft_status_t s = weft__bootstrap_allgather(comm, &mine, sizeof mine, cards);
  if (s == WEFT_SUCCESS) s = local;
  for (int p = 0; s == WEFT_SUCCESS && p < comm->nranks; p++)
    if (st->by_rank[p] != NULL) s = check_card(comm, st, p, &cards[p]);
  if (s == WEFT_SUCCESS) s = connect_mesh(comm, st, cards, deadline);
  free(cards);
  if (st->listen_fd >= 0) close(st->listen_fd);
  st->listen_fd = -1;
  if (s != WEFT_SUCCESS) return s;
  for (int p = 0; p < comm->nranks; p++) {
    if (st->by_rank[p] == NULL) continue;
    comm->conns[p].tr = &weft__transport_socket;
    comm->conns[p].priv = st->by_rank[p];
  }
  return WEFT_SUCCESS;
}

static void sock_teardown(struct weft_comm *comm) {
  sock_state *st = comm->transport_state[WEFT__TRANSPORT_SOCKET];
  if (st == NULL) return;
  for (int p = 0; st->by_rank && p < st->nranks; p++) peer_free(st->by_rank[p]);
  if (st->listen_fd >= 0) close(st->listen_fd);
  free(st->by_rank);
  free(st);
  comm->transport_state[WEFT__TRANSPORT_SOCKET] = NULL;
}

const weft__transport weft__transport_socket = {
    .name = "socket",
    .setup = sock_setup,
    .send_progress = sock_send_progress,
    .recv_progress = sock_recv_progress,
    .poll_fds = sock_poll_fds,
    .teardown = sock_teardown,
};

/* socket.c: the TCP transport's data path (transports/transport.h), used between hosts and,
 * when WEFT_TRANSPORT=socket, within one; its setup is in socket_setup.c.
 *
 * Messages. A message of B bytes (0 is a real, empty message) travels as parts, each a
 * 32-byte header {B, part bytes, the call's fingerprint (lib/fingerprint.h)} and the part's
 * payload; the receiver checks the fingerprint before it takes the payload. Below WEFT_SOCKET_SPLIT_BYTES
 * (default 256 KiB) there is one part, on socket 0, written with one sendmsg and read with
 * one recvmsg (header and payload in two iovecs), which keeps the 8-byte latency at one
 * system call per side. Larger messages are cut into NSOCKS parts on 16-byte boundaries (so
 * a part holds whole elements of every datatype) that move on sockets 0..NSOCKS-1 side by
 * side, as Open MPI's TCP BTL stripes over its links and NCCL's socket transport over its
 * NCCL_NSOCKS_PERTHREAD sockets. The receiver knows B, computes the same cut, and checks
 * each header, so a size mismatch between the two ranks is reported, not misread.
 *
 * Bytes moved: B + 32 * parts per message. User buffers are reached only through their
 * memory space (mem/space.h): the kernel reads and writes them at the space's host view. A
 * plain receive lands straight in the destination's host view (one copy, the kernel's); a
 * receive that reduces (dst = acc op incoming), or whose memory has no host view, lands in
 * a per-socket staging buffer of STAGE_BYTES and reaches the destination from there through
 * the space (weft__req_land), whole elements only, each part at its own offset. A send
 * needs a host view (device memory would be staged by the core first).
 *
 * Nothing here blocks: sends and receives use MSG_DONTWAIT, EAGAIN means no progress, and
 * poll_fds hands the waiting rank the sockets of the messages in flight. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/status.h"
#include "mem/space.h"
#include "transports/socket/socket_state.h"
#include "transports/transport.h"

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
    p->hdr.fp = r->call->fp;
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
  size_t h = WIRE_HDR - p->hdr_moved < k ? WIRE_HDR - p->hdr_moved : k;
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
    if (p->hdr_moved < WIRE_HDR)
      iov[n++] = (struct iovec){(char *)&p->hdr + p->hdr_moved, WIRE_HDR - p->hdr_moved};
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
    if (p->hdr_moved == WIRE_HDR && p->moved == p->len) part_finish(x, p, r);
    else if ((size_t)k < want) return WEFT_SUCCESS; /* the socket buffer is full */
  }
  return WEFT_SUCCESS;
}

static weft_status_t sock_send_test(struct weft_comm *comm, weft__conn *c, weft__req *r,
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
  if (!weft__fp_equal(&p->hdr.fp, &r->call->fp)) {
    sp->dead = weft__fp_mismatch(comm, sp->peer, &r->call->fp, &p->hdr.fp);
    return sp->dead;
  }
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
  if (p->hdr_moved < WIRE_HDR)
    iov[n++] = (struct iovec){(char *)&p->hdr + p->hdr_moved, WIRE_HDR - p->hdr_moved};
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
  int had_hdr = p->hdr_moved == WIRE_HDR;
  size_t payload = part_account(p, (size_t)k);
  if (!had_hdr && p->hdr_moved == WIRE_HDR) WEFT_TRY(check_header(comm, sp, p, r));
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
    if (p->hdr_moved == WIRE_HDR && p->moved == p->len) part_finish(x, p, r);
  }
  return WEFT_SUCCESS;
}

static weft_status_t sock_recv_test(struct weft_comm *comm, weft__conn *c, weft__req *r,
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

/* Socket (loopback), 2 ranks, loaded, all_reduce_perf -z 1 (p50 of single calls, medians
 * of 3-5 interleaved runs, on the 2-core VM weft is developed on): ring 86 us and recursive
 * doubling 47 us at 8 B, hence alpha ~40 us; 171 us for both at 256 KiB, hence beta ~0.25
 * us/KiB. */
const weft__transport weft__transport_socket = {
    .name = "socket",
    .caps = WEFT__TRANSPORT_CAP_RECV_REDUCE,
    .model = {40.0, 0.25, 0.05, 0.0, 1.5},
    .card_bytes = sizeof(sock_card),
    .can_connect = weft__socket_can_connect,
    .listen = weft__socket_listen,
    .connect = weft__socket_connect,
    .close = weft__socket_close,
    .send_test = sock_send_test,
    .recv_test = sock_recv_test,
    .poll_fds = sock_poll_fds,
};

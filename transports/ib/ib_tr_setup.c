/* ib_tr_setup.c: how the ib transport chooses and connects its peers (transports/
 * transport.h's can_connect, listen, connect and close) over the engine's handles
 * (ib_net.h), without ever waiting for one.
 *
 * Choice: a pair whose two hosts both list an HCA (kind "ib" or "roce" in the system view,
 * topo/topo.h; weft__topo_discover_ib puts the usable ports there) prefers ib across hosts
 * (50: above socket's 10, below shm's 100 within a host). Within a host it returns 1, so
 * shm always wins, and sockets too where shm is not used, but WEFT_TRANSPORT=ib can force
 * it between every pair. Without a usable port (no libibverbs, no device, WEFT_IB_DISABLE=1)
 * no host lists an HCA and ib is never chosen; ib_dev.c has said why in one INFO line.
 *
 * Set-up. listen opens this rank's HCA port (the one weft__topo_pick_hca names: its NUMA
 * node's, spread over the node's ranks), makes the engine's listen comm, and a TCP socket
 * on the interface the socket transport would use, whose address goes in the card. The
 * engine needs three handles per direction (listen, connect, accept: ib_net.h); after the
 * core's all-gather of cards, the lower rank of a pair opens one TCP connection to the
 * higher, and the two exchange them on it: each side sends its listen handle; on the
 * peer's listen handle it connects (send comm) and sends the connect handle; on the peer's
 * connect handle it accepts (recv comm) and sends the accept handle; on the peer's accept
 * handle its send comm is complete. A handle is read only once poll says bytes are there,
 * so no rank waits on one that is itself waiting, and all pairs progress side by side. The
 * handles carry their own MAC (the job's secret), so a stray connection is refused. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/status.h"
#include "mem/space.h"
#include "topo/topo.h"
#include "transports/ib/ib_transport.h"

#define STEP_NS 200000000ull /* one blocking step (a connect, a handle): 0.2 s at most */

static int host_has_hca(const weft__topo_host *h) {
  for (int i = 0; i < h->ndevices; i++)
    if (strcmp(h->devices[i].kind, "ib") == 0 || strcmp(h->devices[i].kind, "roce") == 0) return 1;
  return 0;
}

int weft__ibt_can_connect(const weft__topo_system *topo, int a, int b) {
  int ha = topo->ranks[a].host, hb = topo->ranks[b].host;
  if (!host_has_hca(&topo->hosts[ha]) || !host_has_hca(&topo->hosts[hb])) return 0;
  return ha != hb ? 50 : 1;
}

weft_status_t weft__ibt_fail(struct weft_comm *comm, ibt_peer *pp, const char *op, weft_status_t st) {
  char why[1100];
  snprintf(why, sizeof why, "%s", weft__thread_last_error());
  pp->dead = weft__error(comm, st, "rank %d: ib %s peer %d: %s", comm->rank, op, pp->peer, why);
  return pp->dead;
}

/* The engine's port this rank uses: the HCA the topology picks for it, else the first. */
static int pick_port(struct weft_comm *comm) {
  const weft__ib_port_info *ports;
  int n = weft__ib_ports(&ports, NULL), i = weft__topo_pick_hca(comm->topo, comm->rank);
  if (n == 0) return -1;
  if (i >= 0) {
    const char *name = comm->topo->hosts[comm->topo->ranks[comm->rank].host].devices[i].name;
    for (int k = 0; k < n; k++)
      if (strcmp(ports[k].name, name) == 0) return k;
  }
  return 0;
}

static void peer_free(ibt_peer *pp) {
  if (pp == NULL) return;
  if (pp->fd >= 0) close(pp->fd);
  if (pp->sc != NULL) weft__ib_dereg_mr_send(pp->sc, pp->smr);
  if (pp->rc != NULL) weft__ib_dereg_mr_recv(pp->rc, pp->rmr);
  weft__ib_close_send(pp->sc);
  weft__ib_close_recv(pp->rc);
  free(pp->sstage);
  free(pp->rstage);
  free(pp);
}

static weft_status_t state_new(struct weft_comm *comm, const int *peers, int npeers, ibt_state **out) {
  ibt_state *st = calloc(1, sizeof *st);
  if (st == NULL || (st->by_rank = calloc((size_t)comm->nranks, sizeof(ibt_peer *))) == NULL) {
    free(st);
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: ib setup: out of memory", comm->rank);
  }
  comm->transport_state[weft__transport_index(&weft__transport_ib)] = st;
  *out = st;
  st->nranks = comm->nranks;
  st->listen_fd = -1;
  st->slice = weft__env_size("WEFT_IB_SLICE_BYTES", IBT_SLICE_DEFAULT);
  if (st->slice < 4096 || st->slice % 4096 != 0 || st->slice >= ((size_t)1 << 31)) {
    WEFT_WARN("WEFT_IB_SLICE_BYTES=%zu is not a multiple of 4096 in 4 KiB..2 GiB; using %zu", st->slice,
              IBT_SLICE_DEFAULT);
    st->slice = IBT_SLICE_DEFAULT;
  }
  int incoming = 0;
  for (int i = 0; i < npeers; i++) {
    int p = peers[i];
    if (p < 0 || p >= comm->nranks || p == comm->rank || st->by_rank[p] != NULL) continue;
    ibt_peer *pp = st->by_rank[p] = calloc(1, sizeof *pp);
    if (pp == NULL) return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: ib setup: out of memory", comm->rank);
    pp->peer = p;
    pp->fd = -1;
    snprintf(pp->self, sizeof pp->self, "rank %d", comm->rank);
    snprintf(pp->name, sizeof pp->name, "rank %d", p);
    pp->opts = (weft__ib_opts){.secret = comm->secret, .self = pp->self, .peer = pp->name,
                               .timeout_ms = comm->timeout_ms};
    incoming += p < comm->rank;
  }
  st->maxpending = incoming + 16; /* room for stray connections */
  st->pending = calloc((size_t)st->maxpending, sizeof *st->pending);
  if (st->pending == NULL)
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: ib setup: out of memory", comm->rank);
  return WEFT_SUCCESS;
}

/* The engine's listen comm on this rank's port, and the set-up socket. */
static weft_status_t make_card(struct weft_comm *comm, ibt_state *st, ibt_card *card) {
  const char *why = NULL;
  if (weft__ib_ports(NULL, &why) == 0)
    return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: ib setup: the ib transport is unavailable here: %s",
                       comm->rank, why);
  st->port = pick_port(comm);
  weft__ib_opts o = {.secret = comm->secret, .self = "listen", .peer = "-", .timeout_ms = comm->timeout_ms};
  char self[24];
  snprintf(self, sizeof self, "rank %d", comm->rank);
  o.self = self;
  weft__error_quiet(1);
  weft_status_t s = weft__ib_listen(st->port, &o, &st->lh, &st->lc);
  weft__error_quiet(0);
  if (s != WEFT_SUCCESS) {
    char m[1100];
    snprintf(m, sizeof m, "%s", weft__thread_last_error());
    return weft__error(comm, s, "rank %d: ib setup: listen on its HCA port failed: %s", comm->rank, m);
  }
  char ifname[64] = "";
  s = WEFT_SUCCESS;
  if (weft__env_str("WEFT_SOCKET_IFNAME", NULL) != NULL ||
      weft__topo_pick_nic(comm, ifname, sizeof ifname, &card->addr) != 0)
    s = weft__sockaddr_pick_local(&card->addr, ifname, sizeof ifname);
  if (s != WEFT_SUCCESS) {
    char m[512];
    snprintf(m, sizeof m, "%s", weft__thread_last_error());
    return weft__error(comm, s, "rank %d: ib setup: no interface for the handle exchange: %s", comm->rank, m);
  }
  st->listen_fd = weft__sock_listen(&card->addr, 4096);
  if (st->listen_fd < 0)
    return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: ib setup: cannot listen on interface %s: %s", comm->rank,
                       ifname, strerror(errno));
  const weft__ib_port_info *ports;
  weft__ib_ports(&ports, NULL);
  WEFT_INFO("rank %d: ib transport on %s:%d (%s), handles over %s", comm->rank, ports[st->port].name,
            ports[st->port].port, ports[st->port].link_ib ? "IB" : "RoCE", ifname);
  card->ok = 1;
  return WEFT_SUCCESS;
}

weft_status_t weft__ibt_listen(struct weft_comm *comm, const int *peers, int npeers, void *card) {
  ibt_card *me = card;
  memset(me, 0, sizeof *me);
  ibt_state *st = NULL;
  WEFT_TRY(state_new(comm, peers, npeers, &st));
  me->slice = st->slice;
  if (npeers == 0) return me->ok = 1, WEFT_SUCCESS;
  /* A rank that cannot listen still publishes its card (ok 0): its peers fail at once. */
  return make_card(comm, st, me);
}

static weft_status_t check_card(struct weft_comm *comm, const ibt_state *st, int p, const ibt_card *card) {
  if (!card->ok)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: ib setup: peer %d could not open its HCA port or "
                       "set-up socket (see that rank's error)", comm->rank, p);
  if (card->slice != st->slice)
    return weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: ib setup: peer %d uses WEFT_IB_SLICE_BYTES=%zu, "
                       "this rank %zu: every rank must use the same", comm->rank, p, (size_t)card->slice, st->slice);
  return WEFT_SUCCESS;
}

static weft_status_t send_msg(struct weft_comm *comm, ibt_peer *pp, int kind, const weft__ib_handle *h) {
  ibt_msg m = {.magic = IBT_MSG_MAGIC, .rank = comm->rank, .kind = kind, .h = *h};
  if (weft__sock_send_all(pp->fd, &m, sizeof m, weft__now_ns() + STEP_NS) != 0)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: ib setup: sending a handle to peer %d failed: %s",
                       comm->rank, pp->peer, strerror(errno));
  return WEFT_SUCCESS;
}

/* Registered staging, once both comms exist (the slots of ib_transport.h). */
static weft_status_t make_stages(struct weft_comm *comm, const ibt_state *st, ibt_peer *pp) {
  size_t bytes = (IBT_SLOTS * (IBT_SLOT_ROOM + st->slice) + 4095) & ~(size_t)4095; /* whole pages */
  pp->sstage = aligned_alloc(4096, bytes);
  pp->rstage = aligned_alloc(4096, bytes);
  if (pp->sstage == NULL || pp->rstage == NULL)
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: ib setup: no memory for %zu bytes of staging for "
                       "peer %d", comm->rank, 2 * bytes, pp->peer);
  memset(pp->sstage, 0, bytes);
  memset(pp->rstage, 0, bytes);
  weft__error_quiet(1);
  weft_status_t s = weft__ib_reg_mr_send(pp->sc, pp->sstage, bytes, &pp->smr);
  if (s == WEFT_SUCCESS) s = weft__ib_reg_mr_recv(pp->rc, pp->rstage, bytes, &pp->rmr);
  weft__error_quiet(0);
  return s == WEFT_SUCCESS ? s : weft__ibt_fail(comm, pp, "setup: registering staging for", s);
}

/* The next step of the handshake on the peer's message m. */
static weft_status_t on_msg(struct weft_comm *comm, ibt_state *st, ibt_peer *pp, const ibt_msg *m) {
  weft__ib_handle out;
  weft_status_t s = WEFT_SUCCESS;
  weft__error_quiet(1);
  if (m->kind == IBT_LISTEN && pp->sc == NULL) {
    s = weft__ib_connect(st->port, &pp->opts, &m->h, &out, &pp->sc);
    weft__error_quiet(0);
    if (s != WEFT_SUCCESS) return weft__ibt_fail(comm, pp, "setup: connect to", s);
    WEFT_TRY(send_msg(comm, pp, IBT_CONNECT, &out));
  } else if (m->kind == IBT_CONNECT && pp->rc == NULL) {
    s = weft__ib_accept(st->lc, &pp->opts, &m->h, &out, &pp->rc);
    weft__error_quiet(0);
    if (s != WEFT_SUCCESS) return weft__ibt_fail(comm, pp, "setup: accept from", s);
    WEFT_TRY(send_msg(comm, pp, IBT_ACCEPT, &out));
  } else if (m->kind == IBT_ACCEPT && pp->sc != NULL && !pp->finished) {
    s = weft__ib_connect_finish(pp->sc, &m->h);
    weft__error_quiet(0);
    if (s != WEFT_SUCCESS) return weft__ibt_fail(comm, pp, "setup: finishing the connection to", s);
    pp->finished = 1;
  } else {
    weft__error_quiet(0);
    return weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: ib setup: peer %d sent handle kind %d out of order",
                       comm->rank, pp->peer, (int)m->kind);
  }
  if (pp->finished && pp->rc != NULL && pp->sstage == NULL) WEFT_TRY(make_stages(comm, st, pp));
  return WEFT_SUCCESS;
}

static int readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

static weft_status_t read_msg(struct weft_comm *comm, int fd, int from, ibt_msg *m) {
  if (weft__sock_recv_all(fd, m, sizeof *m, weft__now_ns() + STEP_NS) != 0)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: ib setup: reading a handle from peer %d failed: %s",
                       comm->rank, from, errno == 0 || errno == ECONNRESET ? "peer closed the connection (exited "
                       "or failed?)" : strerror(errno));
  if (m->magic != IBT_MSG_MAGIC || m->rank != from)
    return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: ib setup: peer %d sent a malformed handle message",
                       comm->rank, from);
  return WEFT_SUCCESS;
}

/* Accepts what waits in the backlog, and files each pending socket whose first message (a
 * listen handle naming a lower rank) came; a connection that is not one of ours is dropped. */
static weft_status_t accept_some(struct weft_comm *comm, ibt_state *st) {
  int fd;
  while (st->npending < st->maxpending && (fd = weft__sock_accept(st->listen_fd, 0)) >= 0)
    st->pending[st->npending++] = fd;
  if (st->npending < st->maxpending && errno != ETIMEDOUT)
    return weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: ib setup: accepting the peers' set-up connections "
                       "failed: %s", comm->rank, strerror(errno));
  for (int k = 0; k < st->npending; k++) {
    if (!readable(st->pending[k])) continue;
    fd = st->pending[k];
    st->pending[k--] = st->pending[--st->npending];
    ibt_msg m;
    int p = -1;
    if (weft__sock_recv_all(fd, &m, sizeof m, weft__now_ns() + STEP_NS) == 0 && m.magic == IBT_MSG_MAGIC &&
        m.kind == IBT_LISTEN)
      p = m.rank;
    ibt_peer *pp = p >= 0 && p < comm->rank ? st->by_rank[p] : NULL;
    if (pp == NULL || pp->fd >= 0) {
      WEFT_WARN("rank %d: ib setup: dropped a connection without a listen handle of a lower peer (another job "
                "or a stray client?)", comm->rank);
      close(fd);
      continue;
    }
    pp->fd = fd;
    WEFT_TRY(send_msg(comm, pp, IBT_LISTEN, &st->lh));
    WEFT_TRY(on_msg(comm, st, pp, &m));
  }
  return WEFT_SUCCESS;
}

/* One pass over peer pp: open the socket (lower side), then handle what has come. */
static weft_status_t step_peer(struct weft_comm *comm, ibt_state *st, ibt_peer *pp, const ibt_card *card) {
  if (pp->fd < 0 && pp->peer > comm->rank) {
    char buf[96];
    int fd = weft__sock_connect(&card->addr, weft__now_ns() + STEP_NS);
    if (fd < 0 && errno == ETIMEDOUT) return WEFT_SUCCESS; /* next pass */
    if (fd < 0)
      return weft__error(comm, WEFT_ERR_REMOTE, "rank %d: ib setup: connecting to peer %d at %s failed: %s",
                         comm->rank, pp->peer, weft__sockaddr_str(&card->addr, buf, sizeof buf), strerror(errno));
    pp->fd = fd;
    WEFT_TRY(send_msg(comm, pp, IBT_LISTEN, &st->lh));
  }
  while (pp->fd >= 0 && !(pp->finished && pp->rc != NULL) && readable(pp->fd)) {
    ibt_msg m;
    WEFT_TRY(read_msg(comm, pp->fd, pp->peer, &m));
    WEFT_TRY(on_msg(comm, st, pp, &m));
  }
  return WEFT_SUCCESS;
}

static void close_setup(ibt_state *st) {
  for (int k = 0; st->pending != NULL && k < st->npending; k++) close(st->pending[k]);
  st->npending = 0;
  if (st->listen_fd >= 0) close(st->listen_fd);
  st->listen_fd = -1;
}

weft_status_t weft__ibt_connect(struct weft_comm *comm, const void *const *cards, char *waiting, size_t len) {
  ibt_state *st = weft__ibt_state_of(comm);
  for (int p = 0; !st->checked && p < comm->nranks; p++)
    if (st->by_rank[p] != NULL) WEFT_TRY(check_card(comm, st, p, cards[p]));
  st->checked = 1;
  if (st->listen_fd >= 0) WEFT_TRY(accept_some(comm, st));
  int open = 0;
  size_t at = (size_t)snprintf(waiting, len, "handles from peers");
  for (int p = 0; p < st->nranks; p++) {
    ibt_peer *pp = st->by_rank[p];
    if (pp == NULL) continue;
    WEFT_TRY(step_peer(comm, st, pp, cards[p]));
    if (pp->finished && pp->rc != NULL) continue;
    open++;
    if (at + 8 < len) at += (size_t)snprintf(waiting + at, len - at, " %d", p);
  }
  if (open > 0) return WEFT_IN_PROGRESS;
  close_setup(st);
  for (int p = 0; p < st->nranks; p++)
    if (st->by_rank[p] != NULL) comm->conns[p].priv = st->by_rank[p];
  return WEFT_SUCCESS;
}

/* ---- registered windows ---- */
weft_status_t weft__ibt_reg(struct weft_comm *comm, const struct weft__mem_space *space, void *buf, size_t bytes,
                            void **handle) {
  *handle = NULL;
  ibt_state *st = weft__ibt_state_of(comm);
  char *view = bytes > 0 ? space->host_view(space, buf, bytes) : NULL;
  if (st == NULL || st->lc == NULL || view == NULL) return WEFT_SUCCESS; /* no ib peers, or no host view */
  ibt_win *w = calloc(1, sizeof *w);
  if (w == NULL) return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: ib window register: out of memory", comm->rank);
  weft__error_quiet(1);
  weft_status_t s = weft__ib_dev_open(st->port, &w->dev);
  if (s == WEFT_SUCCESS) s = weft__ib_mr_get(w->dev, view, bytes, &w->mr);
  weft__error_quiet(0);
  if (s != WEFT_SUCCESS) {
    char m[1100];
    snprintf(m, sizeof m, "%s", weft__thread_last_error());
    weft__ib_dev_release(w->dev);
    free(w);
    return weft__error(comm, s, "rank %d: ib window register (%zu bytes at %p): %s", comm->rank, bytes, buf, m);
  }
  w->view = view;
  w->bytes = bytes;
  w->next = st->wins;
  st->wins = w;
  *handle = w;
  return WEFT_SUCCESS;
}

void weft__ibt_dereg(struct weft_comm *comm, void *handle) {
  ibt_win *w = handle;
  ibt_state *st = weft__ibt_state_of(comm);
  for (ibt_win **pp = st != NULL ? &st->wins : NULL; pp != NULL && *pp != NULL; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  weft__ib_mr_release(w->dev, w->mr);
  weft__ib_dev_release(w->dev);
  free(w);
}

weft__ib_mr *weft__ibt_window_mr(const ibt_state *st, const char *p, size_t len) {
  for (const ibt_win *w = st->wins; w != NULL; w = w->next)
    if (p >= w->view && len <= w->bytes && (size_t)(p - w->view) <= w->bytes - len) return w->mr;
  return NULL;
}

void weft__ibt_close(struct weft_comm *comm) {
  int slot = weft__transport_index(&weft__transport_ib);
  ibt_state *st = comm->transport_state[slot];
  if (st == NULL) return;
  close_setup(st);
  for (int p = 0; st->by_rank && p < st->nranks; p++) {
    if (comm->conns != NULL && comm->conns[p].priv == st->by_rank[p]) comm->conns[p].priv = NULL;
    peer_free(st->by_rank[p]);
  }
  weft__ib_close_listen(st->lc);
  free(st->by_rank);
  free(st->pending);
  free(st);
  comm->transport_state[slot] = NULL;
}

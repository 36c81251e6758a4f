/* ib_connect.c: the engine's connection set-up and tear-down: handles, RC QPs INIT -> RTR
 * -> RTS, the clear-to-send FIFO (see ib_net.h for the exchange). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "lib/clock.h"
#include "lib/status.h"
#include "lib/siphash.h"
#include "transports/ib/ib_comm.h"

#define HANDLE_MAGIC 0x77666962u /* "wfib" */
#define HANDLE_VERSION 1
enum { KIND_LISTEN = 1, KIND_CONNECT = 2, KIND_ACCEPT = 3 };

/* What a handle carries (host byte order; see ib_net.h). mac is last and covers the rest. */
typedef struct {
  uint32_t magic;
  uint16_t version, kind;
  uint64_t nonce;               /* this handle's */
  uint64_t reply_to;            /* the nonce of the handle it answers; 0 for listen */
  uint8_t link_ib, mtu, nqps, gid_index;
  uint16_t lid, pad;
  uint8_t gid[16];
  uint32_t qpn[WEFT__IB_MAX_QPS];
  uint64_t fifo_addr;
  uint32_t fifo_rkey, pad2;
  char name[64];                /* the maker, for messages */
  uint64_t mac;
} wire;
_Static_assert(sizeof(wire) <= WEFT__IB_HANDLE_BYTES, "a handle holds the wire form");

static uint64_t fresh_nonce(void) {
  uint64_t n = 0;
  if (getrandom(&n, sizeof(n), 0) != (ssize_t)sizeof(n) || n == 0) n = weft__now_ns() | 1;
  return n;
}

static void seal(const uint8_t *secret, wire *w, weft__ib_handle *h) {
  w->magic = HANDLE_MAGIC;
  w->version = HANDLE_VERSION;
  w->mac = weft__siphash(secret, w, offsetof(wire, mac));
  memset(h, 0, sizeof(*h));
  memcpy(h->bytes, w, sizeof(*w));
}

/* Verifies the MAC before anything else is read, then kind and the nonce it answers. */
static weft_status_t open_handle(const weft__ib_opts *o, const weft__ib_handle *h, int kind, uint64_t reply_to,
                                 wire *w) {
  memcpy(w, h->bytes, sizeof(*w));
  uint64_t mac = weft__siphash(o->secret, w, offsetof(wire, mac));
  if ((mac ^ w->mac) != 0 || w->magic != HANDLE_MAGIC || w->version != HANDLE_VERSION)
    return weft__error(NULL, WEFT_ERR_AUTH, "ib: %s: the connection handle from peer %s does not prove the job's "
                       "secret (a handle of another job, or corrupted); refused", o->self, o->peer);
  if (w->kind != kind || (kind != KIND_LISTEN && w->reply_to != reply_to))
    return weft__error(NULL, WEFT_ERR_AUTH, "ib: %s: the handle from peer %s (%.63s) is not the %s this side "
                       "expects (kind %u); refused", o->self, o->peer, w->name,
                       kind == KIND_CONNECT ? "connect handle answering our listen handle"
                       : kind == KIND_ACCEPT ? "accept handle answering our connect handle" : "listen handle", w->kind);
  w->name[sizeof(w->name) - 1] = '\0';
  if (w->nqps < 1 || w->nqps > WEFT__IB_MAX_QPS)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "ib: %s: peer %s asks for %u QPs", o->self, o->peer, w->nqps);
  return WEFT_SUCCESS;
}

static void fill_port(const weft__ib_dev *d, const char *self, wire *w) {
  w->link_ib = (uint8_t)d->info->link_ib;
  w->mtu = (uint8_t)d->info->mtu;
  w->lid = d->info->lid;
  w->gid_index = (uint8_t)d->info->gid_index;
  memcpy(w->gid, d->info->gid.raw, 16);
  snprintf(w->name, sizeof(w->name), "%.24s on %.28s:%d", self, d->info->name, d->info->port);
}

/* ---- errors ---- */
weft_status_t weft__ib_comm_fail(ib_comm *c, weft_status_t st, const char *fmt, ...) {
  if (c->failed != WEFT_SUCCESS) return weft__ib_comm_error(c);
  char msg[480];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(c->err, sizeof(c->err), "ib: %s: peer %s (%s:%d -> QP %u): %s", c->self, c->peer, c->dev->info->name,
           c->dev->info->port, c->remote_qpn[0], msg);
  c->failed = st;
  return weft__error(NULL, st, "%s", c->err);
}

weft_status_t weft__ib_comm_error(ib_comm *c) {
  weft__error_quiet(1); /* logged once, when it happened */
  weft_status_t st = weft__error(NULL, c->failed, "%s", c->err);
  weft__error_quiet(0);
  return st;
}

/* ---- QPs ---- */
static weft_status_t verbs_fail(ib_comm *c, const char *call, int err) {
  return weft__error(NULL, WEFT_ERR_SYSTEM, "ib: %s: peer %s: %s on %s:%d failed: %s", c->self, c->peer, call,
                     c->dev->info->name, c->dev->info->port, strerror(err));
}

static weft_status_t create_qps(ib_comm *c, int nqps) {
  const weft__ibv *ibv = c->dev->ibv;
  int cqe = 2 * WEFT__IB_MAX_REQUESTS * nqps + 16;
  c->cq = ibv->create_cq(c->dev->ctx, cqe, NULL, NULL, 0);
  if (c->cq == NULL) return verbs_fail(c, "ibv_create_cq", errno);
  c->nqps = nqps;
  for (int q = 0; q < nqps; q++) {
    struct ibv_qp_init_attr a = {.send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC,
                                 .cap = {.max_send_wr = 2 * WEFT__IB_MAX_REQUESTS, .max_recv_wr = WEFT__IB_MAX_REQUESTS,
                                         .max_send_sge = 1, .max_recv_sge = 1,
                                         .max_inline_data = sizeof(weft__ib_cts)}};
    c->qp[q] = ibv->create_qp(c->dev->pd, &a);
    if (c->qp[q] == NULL) return verbs_fail(c, "ibv_create_qp", errno);
    c->qpn[q] = c->qp[q]->qp_num;
    struct ibv_qp_attr ia = {.qp_state = IBV_QPS_INIT, .port_num = (uint8_t)c->dev->info->port,
                             .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
    int rc = ibv->modify_qp(c->qp[q], &ia, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) return verbs_fail(c, "ibv_modify_qp(INIT)", rc);
  }
  return WEFT_SUCCESS;
}

/* RTR toward the remote QPs of w, then RTS, with WEFT_IB_TIMEOUT / WEFT_IB_RETRY_CNT. */
static weft_status_t connect_qps(ib_comm *c, const wire *w) {
  const weft__ibv *ibv = c->dev->ibv;
  const weft__ib_config *cfg = weft__ib_config_get();
  for (int q = 0; q < c->nqps; q++) {
    c->remote_qpn[q] = w->qpn[q];
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .dest_qp_num = w->qpn[q], .rq_psn = 0,
                            .max_dest_rd_atomic = 1, .min_rnr_timer = 12};
    a.path_mtu = w->mtu < c->dev->info->mtu ? (enum ibv_mtu)w->mtu : c->dev->info->mtu;
    a.ah_attr.port_num = (uint8_t)c->dev->info->port;
    if (w->link_ib) {
      a.ah_attr.dlid = w->lid;
    } else { /* RoCE routes by GID: a global route header is required */
      a.ah_attr.is_global = 1;
      memcpy(a.ah_attr.grh.dgid.raw, w->gid, 16);
      a.ah_attr.grh.sgid_index = (uint8_t)c->dev->info->gid_index;
      a.ah_attr.grh.hop_limit = 255;
    }
    int rc = ibv->modify_qp(c->qp[q], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0) return verbs_fail(c, "ibv_modify_qp(RTR)", rc);
    struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS, .sq_psn = 0, .timeout = (uint8_t)cfg->timeout,
                            .retry_cnt = (uint8_t)cfg->retry_cnt, .rnr_retry = 7, .max_rd_atomic = 1};
    rc = ibv->modify_qp(c->qp[q], &s, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0) return verbs_fail(c, "ibv_modify_qp(RTS)", rc);
  }
  return WEFT_SUCCESS;
}

static weft_status_t comm_init(ib_comm *c, int port, const weft__ib_opts *o, int is_send) {
  c->is_send = is_send;
  snprintf(c->self, sizeof(c->self), "%s", o->self ? o->self : "?");
  snprintf(c->peer, sizeof(c->peer), "%s", o->peer ? o->peer : "?");
  memcpy(c->secret, o->secret, sizeof(c->secret));
  c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
  for (int i = 0; i < WEFT__IB_MAX_REQUESTS; i++) c->reqs[i].comm = c;
  return weft__ib_dev_open(port, &c->dev);
}

static void comm_free(ib_comm *c) {
  if (c->dev == NULL) return;
  for (int q = 0; q < c->nqps; q++)
    if (c->qp[q] != NULL) c->dev->ibv->destroy_qp(c->qp[q]);
  if (c->cq != NULL) c->dev->ibv->destroy_cq(c->cq);
  weft__ib_dev_release(c->dev);
}

static int link_mismatch(const weft__ib_opts *o, const weft__ib_dev *d, const wire *w) {
  if (w->link_ib == d->info->link_ib) return 0;
  weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "ib: %s: peer %s is on %s (%s) and this side on %s:%d (%s): an "
              "InfiniBand port cannot reach a RoCE one", o->self, o->peer, w->name, w->link_ib ? "IB" : "RoCE",
              d->info->name, d->info->port, d->info->link_ib ? "IB" : "RoCE");
  return 1;
}

/* ---- listen / connect / accept ---- */
weft_status_t weft__ib_listen(int port, const weft__ib_opts *o, weft__ib_handle *handle,
                              weft__ib_listen_comm **out) {
  *out = NULL;
  weft__ib_listen_comm *l = calloc(1, sizeof(*l));
  if (l == NULL) return weft__error(NULL, WEFT_ERR_NO_MEMORY, "ib: %s: listen: out of memory", o->self);
  weft_status_t st = weft__ib_dev_open(port, &l->dev);
  if (st != WEFT_SUCCESS) {
    free(l);
    return st;
  }
  l->nonce = fresh_nonce();
  wire w = {.kind = KIND_LISTEN, .nonce = l->nonce, .nqps = 1};
  fill_port(l->dev, o->self, &w);
  seal(o->secret, &w, handle);
  *out = l;
  return WEFT_SUCCESS;
}

static weft_status_t make_fifo(weft__ib_send_comm *s) {
  s->fifo = aligned_alloc(4096, 4096);
  if (s->fifo == NULL) return weft__error(NULL, WEFT_ERR_NO_MEMORY, "ib: %s: FIFO: out of memory", s->c.self);
  memset(s->fifo, 0, 4096);
  s->fifo_mr = s->c.dev->ibv->reg_mr(s->c.dev->pd, s->fifo, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (s->fifo_mr == NULL) return verbs_fail(&s->c, "ibv_reg_mr(FIFO)", errno);
  return WEFT_SUCCESS;
}

weft_status_t weft__ib_connect(int port, const weft__ib_opts *o, const weft__ib_handle *listen,
                               weft__ib_handle *handle, weft__ib_send_comm **out) {
  *out = NULL;
  wire lw;
  WEFT_TRY(open_handle(o, listen, KIND_LISTEN, 0, &lw));
  weft__ib_send_comm *s = calloc(1, sizeof(*s));
  if (s == NULL) return weft__error(NULL, WEFT_ERR_NO_MEMORY, "ib: %s: connect: out of memory", o->self);
  weft_status_t st = comm_init(&s->c, port, o, 1);
  if (st == WEFT_SUCCESS && link_mismatch(o, s->c.dev, &lw)) st = WEFT_ERR_INVALID_ARGUMENT;
  if (st == WEFT_SUCCESS) st = create_qps(&s->c, weft__ib_config_get()->qps_per_conn);
  if (st == WEFT_SUCCESS) st = make_fifo(s);
  if (st != WEFT_SUCCESS) {
    weft__ib_close_send(s);
    return st;
  }
  s->nonce = fresh_nonce();
  wire w = {.kind = KIND_CONNECT, .nonce = s->nonce, .reply_to = lw.nonce, .nqps = (uint8_t)s->c.nqps,
            .fifo_addr = (uint64_t)(uintptr_t)s->fifo, .fifo_rkey = s->fifo_mr->rkey};
  fill_port(s->c.dev, o->self, &w);
  memcpy(w.qpn, s->c.qpn, sizeof(w.qpn));
  seal(o->secret, &w, handle);
  *out = s;
  return WEFT_SUCCESS;
}

weft_status_t weft__ib_accept(weft__ib_listen_comm *l, const weft__ib_opts *o,
                              const weft__ib_handle *connect, weft__ib_handle *handle,
                              weft__ib_recv_comm **out) {
  *out = NULL;
  wire cw;
  WEFT_TRY(open_handle(o, connect, KIND_CONNECT, l->nonce, &cw));
  if (link_mismatch(o, l->dev, &cw)) return WEFT_ERR_INVALID_ARGUMENT;
  weft__ib_recv_comm *r = calloc(1, sizeof(*r));
  if (r == NULL) return weft__error(NULL, WEFT_ERR_NO_MEMORY, "ib: %s: accept: out of memory", o->self);
  weft_status_t st = comm_init(&r->c, l->dev->index, o, 0);
  if (st == WEFT_SUCCESS) st = create_qps(&r->c, cw.nqps); /* the sender chose the QP count */
  if (st == WEFT_SUCCESS) st = connect_qps(&r->c, &cw);
  if (st != WEFT_SUCCESS) {
    weft__ib_close_recv(r);
    return st;
  }
  r->fifo_addr = cw.fifo_addr;
  r->fifo_rkey = cw.fifo_rkey;
  wire w = {.kind = KIND_ACCEPT, .nonce = fresh_nonce(), .reply_to = cw.nonce, .nqps = (uint8_t)r->c.nqps};
  fill_port(r->c.dev, o->self, &w);
  memcpy(w.qpn, r->c.qpn, sizeof(w.qpn));
  seal(o->secret, &w, handle);
  *out = r;
  return WEFT_SUCCESS;
}

weft_status_t weft__ib_connect_finish(weft__ib_send_comm *s, const weft__ib_handle *accept) {
  weft__ib_opts o = {.secret = s->c.secret, .self = s->c.self, .peer = s->c.peer};
  wire aw;
  WEFT_TRY(open_handle(&o, accept, KIND_ACCEPT, s->nonce, &aw));
  if (aw.nqps != s->c.nqps)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "ib: %s: peer %s accepted with %u QPs, %d were offered",
                       s->c.self, s->c.peer, aw.nqps, s->c.nqps);
  WEFT_TRY(connect_qps(&s->c, &aw));
  s->connected = 1;
  return WEFT_SUCCESS;
}

void weft__ib_close_send(weft__ib_send_comm *s) {
  if (s == NULL) return;
  if (s->fifo_mr != NULL) s->c.dev->ibv->dereg_mr(s->fifo_mr);
  comm_free(&s->c);
  free(s->fifo);
  free(s);
}

void weft__ib_close_recv(weft__ib_recv_comm *r) {
  if (r == NULL) return;
  comm_free(&r->c);
  free(r);
}

void weft__ib_close_listen(weft__ib_listen_comm *l) {
  if (l == NULL) return;
  weft__ib_dev_release(l->dev);
  free(l);
}

/* Latency: an assumed 2 us per message (a verbs RDMA write round on current HCAs is 1-3 us;
 * to be measured on hardware, which weft's ib transport has not run on yet). Bandwidth: the
 * port's active speed x width, 8 bits per byte. */
void weft__ib_cost(int port, double *alpha_us, double *beta_us_per_byte) {
  const weft__ib_port_info *ports;
  int n = weft__ib_ports(&ports, NULL);
  int mbps = port >= 0 && port < n && ports[port].speed_mbps > 0 ? ports[port].speed_mbps : 100000;
  *alpha_us = 2.0;
  *beta_us_per_byte = 8.0 / (double)mbps;
}

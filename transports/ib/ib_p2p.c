/* ib_p2p.c: the engine's data path: clear-to-send FIFO, RDMA writes with immediate, and
 * completions (the protocol is described in ib_net.h; NCCL's net_ib p2p is its model). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "lib/clock.h"
#include "lib/status.h"
#include "transports/ib/ib_comm.h"

#define MAX_MSG ((size_t)1 << 31)

void weft__ib_chunk(size_t size, int nqps, int q, size_t *off, size_t *len) {
  size_t per = (size + (size_t)nqps - 1) / (size_t)nqps;
  per = (per + WEFT__IB_CHUNK_ALIGN - 1) / WEFT__IB_CHUNK_ALIGN * WEFT__IB_CHUNK_ALIGN;
  size_t start = per * (size_t)q;
  *off = start < size ? start : size;
  *len = start < size ? (size - start < per ? size - start : per) : 0;
}

weft_status_t weft__ib_reg_mr_send(weft__ib_send_comm *s, void *data, size_t size, weft__ib_mr **mr) {
  return weft__ib_mr_get(s->c.dev, data, size, mr);
}
weft_status_t weft__ib_reg_mr_recv(weft__ib_recv_comm *r, void *data, size_t size, weft__ib_mr **mr) {
  return weft__ib_mr_get(r->c.dev, data, size, mr);
}
void weft__ib_dereg_mr_send(weft__ib_send_comm *s, weft__ib_mr *mr) { weft__ib_mr_release(s->c.dev, mr); }
void weft__ib_dereg_mr_recv(weft__ib_recv_comm *r, weft__ib_mr *mr) { weft__ib_mr_release(r->c.dev, mr); }

/* The comm's sticky error, or a fatal event of its HCA. */
static weft_status_t check_comm(ib_comm *c) {
  if (c->failed != WEFT_SUCCESS) return weft__ib_comm_error(c);
  const char *fatal = weft__ib_dev_fatal(c->dev, c->qpn, c->nqps);
  if (fatal != NULL) return weft__ib_comm_fail(c, WEFT_ERR_SYSTEM, "%s", fatal);
  return WEFT_SUCCESS;
}

static weft_status_t bad_usage(ib_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static weft_status_t bad_usage(ib_comm *c, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return weft__ib_comm_fail(c, WEFT_ERR_INVALID_ARGUMENT, "%s", msg);
}

/* ---- send ---- */
static weft_status_t post_data(weft__ib_send_comm *s, weft__ib_request *req, int slot, const void *data,
                               size_t size, weft__ib_mr *mr, const weft__ib_cts *cts) {
  ib_comm *c = &s->c;
  for (int q = 0; q < c->nqps; q++) {
    size_t off, len;
    weft__ib_chunk(size, c->nqps, q, &off, &len);
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)data + off, .length = (uint32_t)len,
                          .lkey = mr != NULL ? mr->mr->lkey : 0};
    struct ibv_send_wr wr = {.wr_id = weft__ib_wr_id(slot, WEFT__IB_WR_DATA, q, req->seq), .sg_list = &sge,
                             .num_sge = len > 0 ? 1 : 0, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32((uint32_t)size)};
    wr.wr.rdma.remote_addr = cts->addr + off;
    wr.wr.rdma.rkey = cts->rkey;
    struct ibv_send_wr *bad = NULL;
    int rc = weft__ibv_post_send(c->qp[q], &wr, &bad);
    if (rc != 0)
      return weft__ib_comm_fail(c, WEFT_ERR_SYSTEM, "send #%llu (%zu bytes): ibv_post_send on QP %d of %d: %s",
                                (unsigned long long)req->seq, size, q, c->nqps, strerror(rc));
    req->events++;
  }
  return WEFT_SUCCESS;
}

weft_status_t weft__ib_isend(weft__ib_send_comm *s, const void *data, size_t size, uint32_t tag,
                             weft__ib_mr *mr, weft__ib_request **out) {
  ib_comm *c = &s->c;
  *out = NULL;
  WEFT_TRY(check_comm(c));
  if (!s->connected) return bad_usage(c, "send before weft__ib_connect_finish");
  if (size >= MAX_MSG) return bad_usage(c, "send #%llu of %zu bytes: at most 2^31 - 1", (unsigned long long)c->seq, size);
  if (size > 0 && (mr == NULL || (uintptr_t)data < mr->start || (uintptr_t)data + size > mr->end))
    return bad_usage(c, "send #%llu: %zu bytes at %p are not inside the registration given", (unsigned long long)c->seq,
                     size, data);
  int slot = (int)(c->seq % WEFT__IB_MAX_REQUESTS);
  volatile weft__ib_cts *e = &s->fifo[slot];
  weft__ib_request *req = &c->reqs[slot];
  uint64_t now = weft__now_ns();
  if (__atomic_load_n(&e->idx, __ATOMIC_ACQUIRE) != c->seq + 1 || req->in_use) {
    if (s->cts_wait_since == 0) s->cts_wait_since = now;
    if (now - s->cts_wait_since > (uint64_t)c->timeout_ms * 1000000ull)
      return weft__ib_comm_fail(c, WEFT_ERR_TIMEOUT, "send #%llu (%zu bytes): no clear-to-send (the peer's receive) "
                                "within %d ms", (unsigned long long)c->seq, size, c->timeout_ms);
    return WEFT_SUCCESS; /* not yet: the caller tries again */
  }
  weft__ib_cts cts = {.addr = e->addr, .rkey = e->rkey, .size = e->size, .tag = e->tag};
  if (cts.tag != tag)
    return bad_usage(c, "send #%llu: tag %u, but the peer's receive #%llu has tag %u", (unsigned long long)c->seq, tag,
                     (unsigned long long)c->seq, cts.tag);
  if (size > cts.size)
    return bad_usage(c, "send #%llu of %zu bytes into a receive of %u bytes", (unsigned long long)c->seq, size, cts.size);
  *req = (weft__ib_request){.comm = c, .in_use = 1, .seq = c->seq, .size = size, .post_ns = now};
  s->cts_wait_since = 0;
  c->seq++;
  WEFT_TRY(post_data(s, req, slot, data, size, mr, &cts));
  *out = req;
  return WEFT_SUCCESS;
}

/* ---- receive ---- */
static weft_status_t post_cts(weft__ib_recv_comm *r, weft__ib_request *req, int slot, void *data, size_t size,
                              uint32_t tag, weft__ib_mr *mr) {
  ib_comm *c = &r->c;
  weft__ib_cts cts = {.addr = (uint64_t)(uintptr_t)data, .rkey = mr != NULL ? mr->mr->rkey : 0,
                      .size = (uint32_t)size, .tag = tag, .idx = req->seq + 1};
  struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)&cts, .length = sizeof(cts)};
  /* Unsignalled but every WEFT__IB_MAX_REQUESTS-th, which retires the send queue entries. */
  int signaled = slot == 0;
  struct ibv_send_wr wr = {.wr_id = weft__ib_wr_id(slot, WEFT__IB_WR_CTS, 0, req->seq), .sg_list = &sge,
                           .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_INLINE | (signaled ? IBV_SEND_SIGNALED : 0)};
  wr.wr.rdma.remote_addr = r->fifo_addr + (uint64_t)slot * sizeof(weft__ib_cts);
  wr.wr.rdma.rkey = r->fifo_rkey;
  struct ibv_send_wr *bad = NULL;
  int rc = weft__ibv_post_send(c->qp[0], &wr, &bad);
  if (rc != 0)
    return weft__ib_comm_fail(c, WEFT_ERR_SYSTEM, "clear-to-send for receive #%llu: ibv_post_send: %s",
                              (unsigned long long)req->seq, strerror(rc));
  req->events += signaled;
  return WEFT_SUCCESS;
}

weft_status_t weft__ib_irecv(weft__ib_recv_comm *r, void *data, size_t size, uint32_t tag,
                             weft__ib_mr *mr, weft__ib_request **out) {
  ib_comm *c = &r->c;
  *out = NULL;
  WEFT_TRY(check_comm(c));
  if (size >= MAX_MSG) return bad_usage(c, "receive #%llu of %zu bytes: at most 2^31 - 1", (unsigned long long)c->seq, size);
  if (size > 0 && (mr == NULL || (uintptr_t)data < mr->start || (uintptr_t)data + size > mr->end))
    return bad_usage(c, "receive #%llu: %zu bytes at %p are not inside the registration given",
                     (unsigned long long)c->seq, size, data);
  int slot = (int)(c->seq % WEFT__IB_MAX_REQUESTS);
  weft__ib_request *req = &c->reqs[slot];
  if (req->in_use) return WEFT_SUCCESS; /* WEFT__IB_MAX_REQUESTS outstanding */
  *req = (weft__ib_request){.comm = c, .in_use = 1, .seq = c->seq, .size = size, .post_ns = weft__now_ns()};
  c->seq++;
  for (int q = 0; q < c->nqps; q++) { /* one receive per QP: each consumes one immediate */
    struct ibv_recv_wr wr = {.wr_id = weft__ib_wr_id(slot, WEFT__IB_WR_DATA, q, req->seq), .num_sge = 0}, *bad;
    int rc = weft__ibv_post_recv(c->qp[q], &wr, &bad);
    if (rc != 0)
      return weft__ib_comm_fail(c, WEFT_ERR_SYSTEM, "receive #%llu: ibv_post_recv on QP %d of %d: %s",
                                (unsigned long long)req->seq, q, c->nqps, strerror(rc));
    req->events++;
  }
  WEFT_TRY(post_cts(r, req, slot, data, size, tag, mr));
  *out = req;
  return WEFT_SUCCESS;
}

/* ---- completions ---- */
/* "send #3 (4096 bytes, RDMA write with immediate on QP 0 of 1)" for a work request. */
static void describe_wr(const ib_comm *c, const struct ibv_wc *wc, char *buf, size_t len) {
  int slot = (int)(wc->wr_id & 0xff), kind = (int)(wc->wr_id >> 8 & 3), q = (int)(wc->wr_id >> 16 & 0xff);
  const char *what = kind == WEFT__IB_WR_CTS ? "clear-to-send for receive" : c->is_send ? "send" : "receive";
  const char *how = kind == WEFT__IB_WR_CTS ? "RDMA write into the sender's FIFO"
                    : c->is_send            ? "RDMA write with immediate"
                                            : "receive WQE for the immediate";
  snprintf(buf, len, "%s #%llu (%zu bytes, %s on QP %d of %d)", what, (unsigned long long)(wc->wr_id >> 32),
           c->reqs[slot].size, how, q, c->nqps);
}

static weft_status_t failed_wc(ib_comm *c, const struct ibv_wc *wc) {
  char op[200];
  describe_wr(c, wc, op, sizeof(op));
  if (wc->status == IBV_WC_WR_FLUSH_ERR) { /* a consequence: name the HCA event behind it, if any */
    weft__ib_dev_drain_events(c->dev);
    const char *fatal = weft__ib_dev_fatal(c->dev, c->qpn, c->nqps);
    if (fatal != NULL) return weft__ib_comm_fail(c, WEFT_ERR_SYSTEM, "%s; %s was flushed", fatal, op);
  }
  const char *why = wc->status == IBV_WC_WR_FLUSH_ERR ? " (flushed: the QP went to the error state)" : "";
  return weft__ib_comm_fail(c, wc->status == IBV_WC_RETRY_EXC_ERR ? WEFT_ERR_REMOTE : WEFT_ERR_SYSTEM,
                            "%s failed: %s (status %d, vendor error 0x%x)%s", op, c->dev->ibv->wc_status_str(wc->status),
                            wc->status, wc->vendor_err, why);
}

/* Reads the comm's completions into its requests. */
static weft_status_t progress(ib_comm *c) {
  struct ibv_wc wc[16];
  for (;;) {
    int n = weft__ibv_poll_cq(c->cq, 16, wc);
    if (n < 0) return weft__ib_comm_fail(c, WEFT_ERR_SYSTEM, "ibv_poll_cq failed (%d): the completion queue overran", n);
    for (int i = 0; i < n; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) return failed_wc(c, &wc[i]);
      weft__ib_request *req = &c->reqs[wc[i].wr_id & 0xff];
      if (!req->in_use || req->seq != wc[i].wr_id >> 32) continue; /* of a request already failed */
      req->events--;
      if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        uint32_t got = be32toh(wc[i].imm_data);
        if (got > req->size)
          return weft__ib_comm_fail(c, WEFT_ERR_INVALID_ARGUMENT, "receive #%llu: the peer sent %u bytes into %zu",
                                    (unsigned long long)req->seq, got, req->size);
        req->size = got;
      }
    }
    if (n < 16) return WEFT_SUCCESS;
  }
}

weft_status_t weft__ib_test(weft__ib_request *req, int *done, size_t *size) {
  ib_comm *c = req->comm;
  *done = 0;
  weft_status_t st = check_comm(c);
  if (st == WEFT_SUCCESS) st = progress(c);
  if (st == WEFT_SUCCESS && req->events == 0) {
    *done = 1;
    if (size != NULL) *size = req->size;
    req->in_use = 0;
    return WEFT_SUCCESS;
  }
  if (st == WEFT_SUCCESS && weft__now_ns() - req->post_ns > (uint64_t)c->timeout_ms * 1000000ull)
    st = weft__ib_comm_fail(c, WEFT_ERR_TIMEOUT, "%s #%llu (%zu bytes): no completion within %d ms",
                            c->is_send ? "send" : "receive", (unsigned long long)req->seq, req->size, c->timeout_ms);
  if (st != WEFT_SUCCESS) req->in_use = 0;
  return st;
}

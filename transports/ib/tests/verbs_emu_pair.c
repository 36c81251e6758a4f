/* verbs_emu_pair.c: see verbs_emu_pair.h. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "transports/ib/tests/verbs_emu_pair.h"

int emu_test_begin(int *rc) {
  if (!harness_verbs_emu_setup("ib-test")) {
    const char *top = getenv("WEFT_TOP_BUILDDIR");
    printf("1..0 # SKIP verbs emulator not built (no %s/tests/verbs_emu/.libs/libweft_verbs_emu.so)"
           " or no state directory in /dev/shm\n", top ? top : ".");
    return *rc = 0, 0;
  }
  const char *why = NULL;
  if (weft__ibv_get(&why) == NULL) { /* built but broken: a failure, not a skip */
    printf("Bail out! the verbs emulator was built but does not load: %s\n", why);
    harness_verbs_emu_teardown();
    return *rc = 1, 0;
  }
  return 1;
}

void emu_test_teardown(void) { harness_verbs_emu_teardown(); }

void emu_run(int n, harness_body_fn body, void *arg) {
  harness_opts o = {.nranks = n, .no_init = 1, .deadline_s = 60};
  harness_run(&o, body, arg);
}

static int open_end(harness_rank *r, emu_end *e, size_t bytes, int max_send, int max_recv, int access) {
  const char *why = NULL;
  e->ibv = weft__ibv_get(&why);
  if (e->ibv == NULL) return harness_fail(r, "ibv: %s", why), -1;
  int n = 0;
  e->list = e->ibv->get_device_list(&n);
  if (e->list == NULL || n < 1 || (e->ctx = e->ibv->open_device(e->list[0])) == NULL)
    return harness_fail(r, "no emulated device (%d)", n), -1;
  e->pd = e->ibv->alloc_pd(e->ctx);
  e->cq = e->pd ? e->ibv->create_cq(e->ctx, 256, NULL, NULL, 0) : NULL;
  struct ibv_qp_init_attr qa = {.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = (uint32_t)max_send, .max_recv_wr = (uint32_t)max_recv,
                                        .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64}};
  e->qp = e->cq ? e->ibv->create_qp(e->pd, &qa) : NULL;
  e->bytes = bytes;
  e->buf = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (e->buf) memset(e->buf, 0, bytes);
  e->mr = e->qp && e->buf ? e->ibv->reg_mr(e->pd, e->buf, bytes, access) : NULL;
  if (e->mr == NULL) return harness_fail(r, "setup failed: %s", strerror(errno)), -1;
  return 0;
}

static int connect_end(harness_rank *r, emu_end *e, const emu_end_opts *o, int peer) {
  harness_shared *s = r->shared;
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
  int rc = e->ibv->modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = (uint32_t)s->values[peer * 8 + 0];
  a.ah_attr.dlid = (uint16_t)(s->values[peer * 8 + 1] + (o->wrong_lid ? 1 : 0));
  a.ah_attr.port_num = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  if (rc == 0) rc = e->ibv->modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                                     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 12;
  a.retry_cnt = 2;
  a.rnr_retry = o->set_rnr ? o->rnr_retry : 7;
  a.max_rd_atomic = 1;
  if (rc == 0) rc = e->ibv->modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                                     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0) return harness_fail(r, "connecting the QP failed: %s", strerror(rc)), -1;
  e->peer_addr = (uint64_t)s->values[peer * 8 + 2];
  e->peer_rkey = (uint32_t)s->values[peer * 8 + 3];
  return 0;
}

int emu_end_setup(harness_rank *r, emu_end *e, size_t bytes, int max_send, int max_recv,
                  const emu_end_opts *opts) {
  emu_end_opts none = {0};
  const emu_end_opts *o = opts ? opts : &none;
  memset(e, 0, sizeof(*e));
  int access = o->access ? o->access : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (open_end(r, e, bytes, max_send, max_recv, access) != 0) return -1;
  struct ibv_port_attr pa;
  weft__ibv_query_port(e->ibv, e->ctx, 1, &pa);
  harness_shared *s = r->shared;
  s->values[r->rank * 8 + 0] = e->qp->qp_num;
  s->values[r->rank * 8 + 1] = pa.lid;
  s->values[r->rank * 8 + 2] = (long long)(uintptr_t)e->buf;
  s->values[r->rank * 8 + 3] = e->mr->rkey;
  s->flags[r->rank] = 1;
  if (r->nranks < 2 || o->no_connect) return 0;
  int peer = 1 - r->rank;
  if (!harness_wait_flag(r, peer, 1, 10000)) return harness_fail(r, "peer never published"), -1;
  return connect_end(r, e, o, peer);
}

int emu_end_write(emu_end *e, size_t off, size_t len, uint64_t raddr, uint32_t rkey, int with_imm,
                  uint32_t imm, int signaled) {
  struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)(e->buf + off), .length = (uint32_t)len, .lkey = e->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 42, .sg_list = &sge, .num_sge = len ? 1 : 0,
                           .opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
                           .send_flags = signaled ? IBV_SEND_SIGNALED : 0, .imm_data = imm};
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  struct ibv_send_wr *bad = NULL;
  return weft__ibv_post_send(e->qp, &wr, &bad);
}

int emu_end_post_recv(emu_end *e, uint64_t wr_id) {
  struct ibv_recv_wr wr = {.wr_id = wr_id, .num_sge = 0}, *bad = NULL;
  return weft__ibv_post_recv(e->qp, &wr, &bad);
}

int emu_end_post_recv_into(emu_end *e, uint64_t wr_id, size_t off, size_t len) {
  struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)(e->buf + off), .length = (uint32_t)len, .lkey = e->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
  return weft__ibv_post_recv(e->qp, &wr, &bad);
}

int emu_end_send(emu_end *e, size_t off, size_t len, int with_imm, uint32_t imm) {
  struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)(e->buf + off), .length = (uint32_t)len, .lkey = e->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 43, .sg_list = &sge, .num_sge = 1,
                           .opcode = with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED, .imm_data = imm}, *bad = NULL;
  return weft__ibv_post_send(e->qp, &wr, &bad);
}

int emu_end_poll(emu_end *e, struct ibv_wc *wc, int timeout_ms) {
  double end = harness_now_ms() + timeout_ms;
  for (;;) {
    int n = weft__ibv_poll_cq(e->cq, 1, wc);
    if (n != 0) return n;
    if (harness_now_ms() >= end) return 0;
    usleep(200);
  }
}

int emu_end_async_event(emu_end *e, struct ibv_async_event *ev, int timeout_ms) {
  struct pollfd p = {.fd = e->ctx->async_fd, .events = POLLIN};
  if (poll(&p, 1, timeout_ms) != 1) return 0;
  if (e->ibv->get_async_event(e->ctx, ev) != 0) return 0;
  e->ibv->ack_async_event(ev);
  return 1;
}

void emu_end_close(emu_end *e) {
  if (e->ibv == NULL) return;
  if (e->mr) e->ibv->dereg_mr(e->mr);
  if (e->qp) e->ibv->destroy_qp(e->qp);
  if (e->cq) e->ibv->destroy_cq(e->cq);
  if (e->pd) e->ibv->dealloc_pd(e->pd);
  if (e->ctx) e->ibv->close_device(e->ctx);
  if (e->list) e->ibv->free_device_list(e->list);
  free(e->buf);
}

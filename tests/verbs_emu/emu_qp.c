/* emu_qp.c: reliable-connected queue pairs: create, the state machine RESET -> INIT -> RTR
 * -> RTS (each step requires the attributes the verbs spec requires, so a transport that
 * forgets one fails here as on hardware), ERR and back to RESET, and posting.
 * The receive queue lives in the context's shared file, where a peer's worker takes
 * receive WQEs; the send queue is process-local, consumed by this context's worker. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "emu.h"

static uint32_t qpn_of(const emu_context *c, uint32_t idx) { return c->slot << 8 | idx; }

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
  emu_context *c = emu_ctx(pd->context);
  const struct ibv_qp_cap *cap = &a->cap;
  if (a->qp_type != IBV_QPT_RC || a->srq != NULL || a->send_cq == NULL || a->recv_cq == NULL ||
      cap->max_send_wr < 1 || cap->max_send_wr > EMU_MAX_SEND || cap->max_recv_wr > EMU_MAX_RECV ||
      cap->max_send_sge > EMU_MAX_SGE || cap->max_recv_sge > EMU_MAX_SGE ||
      cap->max_inline_data > EMU_MAX_INLINE) {
    errno = EINVAL; /* only RC without SRQ is emulated */
    return NULL;
  }
  emu_qp *q = calloc(1, sizeof(*q));
  if (q != NULL) q->sq = calloc(cap->max_send_wr, sizeof(*q->sq));
  if (q == NULL || q->sq == NULL) {
    if (q != NULL) free(q);
    errno = ENOMEM;
    return NULL;
  }
  pthread_mutex_lock(&c->lock);
  int idx = -1;
  for (int i = 0; i < EMU_MAX_QP && idx < 0; i++)
    if (c->qps[i] == NULL) idx = i;
  if (idx >= 0) {
    emu_qp_shared *s = &c->sh->qp[idx];
    emu_lock(&s->lock);
    s->gen++;
    s->state = IBV_QPS_RESET;
    s->pd = pd->handle;
    s->recv_cq = ((emu_cq *)a->recv_cq)->index;
    s->max_recv = cap->max_recv_wr;
    s->rq_head = s->rq_tail = 0;
    s->in_use = 1;
    pthread_mutex_unlock(&s->lock);
    c->qps[idx] = q;
  }
  pthread_mutex_unlock(&c->lock);
  if (idx < 0) {
    free(q->sq);
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  q->ctx = c;
  q->index = (uint32_t)idx;
  q->max_send = cap->max_send_wr;
  q->max_recv = cap->max_recv_wr;
  q->max_sge = cap->max_send_sge;
  q->max_inline = cap->max_inline_data;
  q->sq_sig_all = (uint32_t)a->sq_sig_all;
  q->qp.context = pd->context;
  q->qp.qp_context = a->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = a->send_cq;
  q->qp.recv_cq = a->recv_cq;
  q->qp.handle = (uint32_t)idx;
  q->qp.qp_num = qpn_of(c, (uint32_t)idx);
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  return &q->qp;
}

/* The shared file of context slot, mapped once per process (again when its owner closed
 * it and the slot now holds another context). NULL when there is none. */
emu_peer *emu_peer_map(emu_context *c, uint32_t slot) {
  pthread_mutex_lock(&c->lock);
  emu_peer *p = c->peers;
  while (p != NULL && !(p->slot == slot && __atomic_load_n(&p->sh->magic, __ATOMIC_ACQUIRE) == EMU_MAGIC))
    p = p->next;
  pthread_mutex_unlock(&c->lock);
  if (p != NULL) return p;
  char path[300];
  snprintf(path, sizeof(path), "%s/ctx-%u", emu_dir(), slot);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return NULL;
  emu_shared *sh = mmap(NULL, sizeof(emu_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (sh == MAP_FAILED) return NULL;
  if (__atomic_load_n(&sh->magic, __ATOMIC_ACQUIRE) != EMU_MAGIC || (p = calloc(1, sizeof(*p))) == NULL) {
    munmap(sh, sizeof(emu_shared));
    return NULL;
  }
  p->slot = slot;
  p->pid = sh->pid;
  p->nonce = sh->nonce;
  p->sh = sh;
  pthread_mutex_lock(&c->lock);
  p->next = c->peers;
  c->peers = p;
  pthread_mutex_unlock(&c->lock);
  return p;
}

static void set_state(emu_qp *q, enum ibv_qp_state st) {
  emu_qp_shared *s = &q->ctx->sh->qp[q->index];
  __atomic_store_n(&s->state, (uint32_t)st, __ATOMIC_RELEASE);
  q->qp.state = st;
}

void emu_qp_to_error(emu_qp *q) {
  emu_context *c = q->ctx;
  emu_qp_shared *s = &c->sh->qp[q->index];
  emu_lock(&s->lock);
  set_state(q, IBV_QPS_ERR);
  for (; s->rq_head < s->rq_tail; s->rq_head++) {
    emu_cqe e = {.wr_id = s->rq[s->rq_head % EMU_MAX_RECV].wr_id, .status = IBV_WC_WR_FLUSH_ERR,
                 .opcode = IBV_WC_RECV, .qp_num = q->qp.qp_num, .sq_seq = UINT64_MAX};
    emu_cq_push(c->sh, s->recv_cq, &e);
  }
  pthread_mutex_unlock(&s->lock);
  emu_worker_kick(c); /* the worker flushes the send queue */
}

static int has(int mask, int need) { return (mask & need) == need; }

static int to_init(emu_qp *q, struct ibv_qp_attr *a, int mask) {
  if (!has(mask, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return EINVAL;
  if (a->port_num < 1 || a->port_num > q->ctx->dev->nports || a->pkey_index != 0) return EINVAL;
  q->port = a->port_num;
  emu_qp_shared *s = &q->ctx->sh->qp[q->index];
  s->access = (uint32_t)a->qp_access_flags;
  s->port = a->port_num;
  return 0;
}

static int to_rtr(emu_qp *q, struct ibv_qp_attr *a, int mask) {
  if (!has(mask, IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return EINVAL;
  const emu_port_cfg *port = &q->ctx->dev->port[q->port - 1];
  /* RoCE needs a GRH (a GID) in the address vector; IB routes by LID within a subnet. */
  if (!port->ib && !a->ah_attr.is_global) return EINVAL;
  if (a->ah_attr.is_global && a->ah_attr.grh.sgid_index >= port->ngids) return EINVAL;
  q->dest_qpn = a->dest_qp_num;
  q->av_ib = !a->ah_attr.is_global;
  q->dlid = a->ah_attr.dlid;
  q->dgid = a->ah_attr.grh.dgid;
  q->ctx->sh->qp[q->index].min_rnr_timer = a->min_rnr_timer;
  q->peer = emu_peer_map(q->ctx, a->dest_qp_num >> 8); /* NULL: unreachable, found out later */
  if (q->peer != NULL) q->peer_gen = q->peer->sh->qp[a->dest_qp_num & 0xff].gen;
  return 0;
}

static int to_rts(emu_qp *q, struct ibv_qp_attr *a, int mask) {
  if (!has(mask, IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                     IBV_QP_MAX_QP_RD_ATOMIC))
    return EINVAL;
  if (a->retry_cnt > 7 || a->rnr_retry > 7 || a->timeout > 31) return EINVAL;
  q->timeout = a->timeout;
  q->retry_cnt = a->retry_cnt;
  q->rnr_retry = a->rnr_retry;
  return 0;
}

static void to_reset(emu_qp *q) {
  emu_qp_shared *s = &q->ctx->sh->qp[q->index];
  emu_lock(&s->lock);
  s->rq_head = s->rq_tail = 0;
  set_state(q, IBV_QPS_RESET);
  pthread_mutex_unlock(&s->lock);
  pthread_mutex_lock(&q->ctx->lock);
  q->sq_posted = q->sq_done = q->sq_retired = 0;
  pthread_mutex_unlock(&q->ctx->lock);
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  emu_qp *q = (emu_qp *)qp;
  if (!(mask & IBV_QP_STATE)) return EINVAL;
  enum ibv_qp_state cur = qp->state, to = a->qp_state;
  int rc;
  if (to == IBV_QPS_ERR) {
    emu_qp_to_error(q);
    return 0;
  }
  if (to == IBV_QPS_RESET) {
    to_reset(q);
    return 0;
  }
  if (cur == IBV_QPS_RESET && to == IBV_QPS_INIT) rc = to_init(q, a, mask);
  else if (cur == IBV_QPS_INIT && to == IBV_QPS_RTR) rc = to_rtr(q, a, mask);
  else if (cur == IBV_QPS_RTR && to == IBV_QPS_RTS) rc = to_rts(q, a, mask);
  else rc = EINVAL;
  if (rc == 0) set_state(q, to);
  return rc;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init) {
  (void)mask;
  emu_qp *q = (emu_qp *)qp;
  memset(a, 0, sizeof(*a));
  a->qp_state = qp->state;
  a->cur_qp_state = qp->state;
  a->port_num = q->port;
  a->dest_qp_num = q->dest_qpn;
  a->timeout = q->timeout;
  a->retry_cnt = q->retry_cnt;
  a->rnr_retry = q->rnr_retry;
  a->cap.max_send_wr = q->max_send;
  a->cap.max_recv_wr = q->max_recv;
  if (init != NULL) {
    memset(init, 0, sizeof(*init));
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->cap = a->cap;
    init->qp_type = IBV_QPT_RC;
  }
  return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp) {
  emu_qp *q = (emu_qp *)qp;
  emu_context *c = q->ctx;
  emu_qp_shared *s = &c->sh->qp[q->index];
  emu_lock(&s->lock);
  s->in_use = 0;
  s->gen++; /* a peer still sending to it sees a different QP from now on */
  __atomic_store_n(&s->state, IBV_QPS_RESET, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&s->lock);
  pthread_mutex_lock(&c->lock);
  while (c->executing == q) pthread_cond_wait(&c->idle, &c->lock);
  c->qps[q->index] = NULL; /* the worker skips it from now on (it holds this lock) */
  pthread_mutex_unlock(&c->lock);
  free(q->sq);
  free(q);
  return 0;
}

/* ---- posting ---- */
static int check_send_wr(const emu_qp *q, const struct ibv_send_wr *wr, uint32_t *len) {
  if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR) return EINVAL;
  if (wr->num_sge < 0 || wr->num_sge > (int)(q->max_sge ? q->max_sge : 1) || wr->num_sge > EMU_MAX_SGE)
    return EINVAL;
  switch (wr->opcode) {
    case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: case IBV_WR_SEND: case IBV_WR_SEND_WITH_IMM:
      break;
    default: return EINVAL; /* reads and atomics are not emulated */
  }
  uint64_t total = 0;
  for (int i = 0; i < wr->num_sge; i++) total += wr->sg_list[i].length;
  if (total > EMU_MAX_MSG) return EINVAL;
  if ((wr->send_flags & IBV_SEND_INLINE) && total > q->max_inline) return EINVAL;
  *len = (uint32_t)total;
  return 0;
}

static void fill_wqe(emu_qp *q, const struct ibv_send_wr *wr, uint32_t len, emu_send_wqe *w) {
  memset(w, 0, offsetof(emu_send_wqe, inline_data));
  w->wr_id = wr->wr_id;
  w->seq = q->sq_posted;
  w->post_ns = emu_now_ns();
  w->opcode = wr->opcode;
  w->flags = wr->send_flags | (q->sq_sig_all ? IBV_SEND_SIGNALED : 0);
  w->imm = wr->imm_data;
  w->rkey = wr->wr.rdma.rkey;
  w->remote_addr = wr->wr.rdma.remote_addr;
  w->num_sge = (uint32_t)wr->num_sge;
  if (wr->send_flags & IBV_SEND_INLINE) { /* the data is copied now: the buffer is free again */
    uint32_t off = 0;
    for (int i = 0; i < wr->num_sge; i++) {
      memcpy(w->inline_data + off, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
      off += wr->sg_list[i].length;
    }
    w->inline_len = len;
  } else {
    /* A WR of no SGEs may carry sg_list NULL: memcpy of NULL is undefined even for 0
     * bytes (UBSan aborted the emulator here in make check-sanitize). */
    if (wr->num_sge > 0) memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
  }
  w->fault = emu_fault_for_next_wr(&w->fault_status);
}

int emu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  emu_qp *q = (emu_qp *)qp;
  emu_context *c = q->ctx;
  int rc = 0;
  pthread_mutex_lock(&c->lock);
  for (; wr != NULL; wr = wr->next) {
    uint32_t len = 0;
    rc = check_send_wr(q, wr, &len);
    if (rc == 0 && q->sq_posted - __atomic_load_n(&q->sq_retired, __ATOMIC_ACQUIRE) >= q->max_send)
      rc = ENOMEM; /* the send queue is full until completions are polled */
    if (rc != 0) break;
    fill_wqe(q, wr, len, &q->sq[q->sq_posted % q->max_send]);
    q->sq_posted++;
  }
  pthread_mutex_unlock(&c->lock);
  if (rc != 0 && bad != NULL) *bad = wr;
  emu_worker_kick(c);
  return rc;
}

int emu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  emu_qp *q = (emu_qp *)qp;
  emu_context *c = q->ctx;
  emu_qp_shared *s = &c->sh->qp[q->index];
  int rc = 0;
  emu_lock(&s->lock);
  for (; wr != NULL; wr = wr->next) {
    if (qp->state == IBV_QPS_RESET || wr->num_sge < 0 || wr->num_sge > EMU_MAX_SGE) rc = EINVAL;
    else if (s->rq_tail - s->rq_head >= s->max_recv) rc = ENOMEM;
    if (rc != 0) break;
    if (qp->state == IBV_QPS_ERR) { /* flushed at once */
      emu_cqe e = {.wr_id = wr->wr_id, .status = IBV_WC_WR_FLUSH_ERR, .opcode = IBV_WC_RECV,
                   .qp_num = qp->qp_num, .sq_seq = UINT64_MAX};
      emu_cq_push(c->sh, s->recv_cq, &e);
      continue;
    }
    emu_recv_wqe *w = &s->rq[s->rq_tail % EMU_MAX_RECV];
    w->wr_id = wr->wr_id;
    w->num_sge = (uint32_t)wr->num_sge;
    /* A WR of no SGEs may carry sg_list NULL: memcpy of NULL is undefined even for 0
     * bytes (UBSan aborted the emulator here in make check-sanitize). */
    if (wr->num_sge > 0) memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
    __atomic_store_n(&s->rq_tail, s->rq_tail + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&s->lock);
  if (rc != 0 && bad != NULL) *bad = wr;
  return rc;
}

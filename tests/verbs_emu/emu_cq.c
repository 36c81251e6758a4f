/* emu_cq.c: completion queues. A CQ is a ring in its context's shared file: the owner's
 * worker and the workers of peer processes append (under a robust process-shared lock),
 * the owner polls. Polling an empty CQ reads two counters and takes no lock. A full CQ is
 * an overrun, as on an HCA: the CQ stops (poll fails) and IBV_EVENT_CQ_ERR is raised. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "emu.h"

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector) {
  (void)comp_vector;
  emu_context *c = emu_ctx(ctx);
  if (cqe < 1 || cqe > EMU_MAX_CQE || channel != NULL) {
    errno = EINVAL; /* completion channels are not emulated: poll the CQ */
    return NULL;
  }
  emu_cq *q = calloc(1, sizeof(*q));
  if (q == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  pthread_mutex_lock(&c->lock);
  int idx = -1;
  for (int i = 0; i < EMU_MAX_CQ && idx < 0; i++)
    if (!c->sh->cq[i].in_use) idx = i;
  if (idx >= 0) {
    emu_cq_shared *s = &c->sh->cq[idx];
    emu_lock(&s->lock);
    s->head = s->tail = 0;
    s->overrun = 0;
    s->size = (uint32_t)cqe;
    s->in_use = 1;
    pthread_mutex_unlock(&s->lock);
  }
  pthread_mutex_unlock(&c->lock);
  if (idx < 0) {
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  q->index = (uint32_t)idx;
  q->cq.context = ctx;
  q->cq.cq_context = cq_context;
  q->cq.cqe = cqe;
  q->cq.handle = (uint32_t)idx;
  return &q->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq) {
  emu_context *c = emu_ctx(cq->context);
  emu_cq *q = (emu_cq *)cq;
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < EMU_MAX_QP; i++)
    if (c->qps[i] != NULL && (c->qps[i]->qp.send_cq == cq || c->qps[i]->qp.recv_cq == cq)) {
      pthread_mutex_unlock(&c->lock);
      return EBUSY;
    }
  emu_cq_shared *s = &c->sh->cq[q->index];
  emu_lock(&s->lock);
  s->in_use = 0;
  pthread_mutex_unlock(&s->lock);
  pthread_mutex_unlock(&c->lock);
  free(q);
  return 0;
}

int emu_cq_push(emu_shared *sh, uint32_t cq, const emu_cqe *e) {
  emu_cq_shared *s = &sh->cq[cq];
  emu_lock(&s->lock);
  int rc = 0;
  if (!s->in_use) {
    rc = -1;
  } else if (s->tail - __atomic_load_n(&s->head, __ATOMIC_ACQUIRE) >= s->size) {
    s->overrun = 1;
    rc = -1;
  } else {
    s->ring[s->tail % s->size] = *e;
    __atomic_store_n(&s->tail, s->tail + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

static void to_wc(const emu_cqe *e, struct ibv_wc *wc) {
  memset(wc, 0, sizeof(*wc));
  wc->wr_id = e->wr_id;
  wc->status = (enum ibv_wc_status)e->status;
  wc->opcode = (enum ibv_wc_opcode)e->opcode;
  wc->vendor_err = e->vendor_err;
  wc->byte_len = e->byte_len;
  wc->imm_data = e->imm;
  wc->qp_num = e->qp_num;
  wc->src_qp = e->src_qp;
  wc->wc_flags = e->wc_flags;
}

int emu_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  emu_context *c = emu_ctx(cq->context);
  emu_cq_shared *s = &c->sh->cq[((emu_cq *)cq)->index];
  if (__atomic_load_n(&s->overrun, __ATOMIC_ACQUIRE)) {
    if (s->overrun == 1) {
      s->overrun = 2; /* report once */
      emu_raise_event(c, IBV_EVENT_CQ_ERR, NULL, 0);
    }
    errno = EOVERFLOW;
    return -1;
  }
  if (__atomic_load_n(&s->tail, __ATOMIC_ACQUIRE) == s->head) return 0;
  emu_lock(&s->lock);
  int k = 0;
  for (; k < n && s->head + (uint64_t)k < s->tail; k++) {
    const emu_cqe *e = &s->ring[(s->head + (uint64_t)k) % s->size];
    to_wc(e, &wc[k]);
    if (e->sq_seq != UINT64_MAX && (e->qp_num >> 8) == c->slot) {
      emu_qp *q = c->qps[e->qp_num & 0xff];
      /* The HCA frees send-queue entries up to the completed WR when its CQE is read. */
      if (q != NULL && e->sq_seq + 1 > q->sq_retired)
        __atomic_store_n(&q->sq_retired, e->sq_seq + 1, __ATOMIC_RELEASE);
    }
  }
  __atomic_store_n(&s->head, s->head + (uint64_t)k, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&s->lock);
  return k;
}

int emu_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
  (void)cq;
  (void)solicited_only;
  return EOPNOTSUPP; /* no completion channels: poll */
}

const char *ibv_wc_status_str(enum ibv_wc_status s) {
  static const char *const names[] = {
      "success", "local length error", "local QP operation error", "local EE context operation error",
      "local protection error", "Work Request Flushed Error", "memory management operation error",
      "bad response error", "local access error", "remote invalid request error",
      "remote access error", "remote operation error", "transport retry counter exceeded",
      "RNR retry counter exceeded", "local RDD violation error", "remote invalid RD request",
      "aborted error", "invalid EE context number", "invalid EE context state",
      "fatal error", "response timeout error", "general error", "TM error", "TM rendezvous error"};
  return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

const char *ibv_event_type_str(enum ibv_event_type e) {
  switch (e) {
    case IBV_EVENT_CQ_ERR: return "CQ error";
    case IBV_EVENT_QP_FATAL: return "local work queue catastrophic error";
    case IBV_EVENT_QP_REQ_ERR: return "invalid request local work queue error";
    case IBV_EVENT_QP_ACCESS_ERR: return "local access violation work queue error";
    case IBV_EVENT_PORT_ACTIVE: return "port active";
    case IBV_EVENT_PORT_ERR: return "port error";
    case IBV_EVENT_DEVICE_FATAL: return "local catastrophic error";
    default: return "unknown";
  }
}

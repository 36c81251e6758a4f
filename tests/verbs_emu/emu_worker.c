/* emu_worker.c: the emulated HCA of one context: a thread that executes the send queues.
 *
 * For each QP in turn it takes the head WR and, as an RC requester would:
 *   1. checks the local SGEs against this context's regions (local protection error);
 *   2. finds the responder: the context file of the destination QP number, whose port must
 *      match the address vector (LID on IB, GID on RoCE) and whose QP must exist, be in RTR
 *      or RTS and its process alive; otherwise the transport timer runs out retry_cnt times
 *      (4.096 us * 2^timeout each) and the WR fails with RETRY_EXC_ERR;
 *   3. checks rkey, bounds and access in the responder's table (remote access error);
 *   4. for WRITE_WITH_IMM and SEND takes a receive WQE, or waits min_rnr_timer and retries
 *      rnr_retry times (7: for ever) before RNR_RETRY_EXC_ERR;
 *   5. writes the bytes into the responder with process_vm_writev, then appends the
 *      responder's receive completion, then its own (when signalled or failed).
 * A failed WR moves the QP to the error state; the WRs behind it are flushed. The thread
 * sleeps on a condition variable when no queue has work, never spins. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include "emu.h"

enum { DONE = 0, RETRY = 1 };

/* IB min_rnr_timer encodings in units of 10 us (code 0 is the longest, 655.36 ms). */
static const uint32_t rnr_10us[32] = {65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
                                      256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192,
                                      12288, 16384, 24576, 32768, 49152};

static void complete(emu_qp *q, const emu_send_wqe *w, int status, uint32_t len) {
  if (status == IBV_WC_SUCCESS && !(w->flags & IBV_SEND_SIGNALED)) return;
  emu_cqe e = {.wr_id = w->wr_id, .status = (uint32_t)status, .byte_len = len,
               .qp_num = q->qp.qp_num, .src_qp = q->dest_qpn, .sq_seq = w->seq};
  e.opcode = w->opcode == IBV_WR_SEND || w->opcode == IBV_WR_SEND_WITH_IMM ? IBV_WC_SEND : IBV_WC_RDMA_WRITE;
  emu_cq_push(q->ctx->sh, ((emu_cq *)q->qp.send_cq)->index, &e);
}

static int fail(emu_qp *q, const emu_send_wqe *w, int status) {
  complete(q, w, status, 0);
  if (q->qp.state != IBV_QPS_ERR) emu_qp_to_error(q);
  return DONE;
}

static void all_to_error(emu_context *c) {
  emu_qp *list[EMU_MAX_QP];
  int n = 0;
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < EMU_MAX_QP; i++)
    if (c->qps[i] != NULL) list[n++] = c->qps[i];
  pthread_mutex_unlock(&c->lock);
  for (int i = 0; i < n; i++) emu_qp_to_error(list[i]); /* the worker runs list[i] or none */
}

static int injected(emu_qp *q, const emu_send_wqe *w) {
  emu_context *c = q->ctx;
  switch (w->fault) {
    case EMU_FAULT_WR_STATUS: return fail(q, w, w->fault_status);
    case EMU_FAULT_QP_ERROR: return fail(q, w, IBV_WC_WR_FLUSH_ERR);
    case EMU_FAULT_FATAL:
      c->fatal = 1;
      emu_raise_event(c, IBV_EVENT_DEVICE_FATAL, NULL, q->port);
      all_to_error(c);
      return fail(q, w, IBV_WC_WR_FLUSH_ERR);
    default: return -1;
  }
}

/* Step 2: the responder QP, or NULL (unreachable, absent, not ready, dead). */
static emu_qp_shared *responder(emu_qp *q, emu_peer **pp) {
  emu_peer *p = q->peer;
  if (p == NULL || __atomic_load_n(&p->sh->magic, __ATOMIC_ACQUIRE) != EMU_MAGIC) {
    p = q->peer = emu_peer_map(q->ctx, q->dest_qpn >> 8);
    if (p != NULL) q->peer_gen = p->sh->qp[q->dest_qpn & 0xff].gen;
  }
  if (p == NULL) return NULL;
  emu_qp_shared *r = &p->sh->qp[q->dest_qpn & 0xff];
  uint32_t rport = r->port;
  if (!r->in_use || r->gen != q->peer_gen || rport < 1 || rport > (uint32_t)p->sh->nports) return NULL;
  const emu_port_cfg *pc = &p->sh->port[rport - 1];
  int routed = q->av_ib ? pc->ib && pc->lid == q->dlid
                        : memcmp(&pc->gid[0], &q->dgid, 16) == 0 || (pc->ngids > 1 && memcmp(&pc->gid[1], &q->dgid, 16) == 0);
  uint32_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
  if (!routed || (st != IBV_QPS_RTR && st != IBV_QPS_RTS)) return NULL;
  if (kill(p->pid, 0) != 0 && errno == ESRCH) return NULL;
  *pp = p;
  return r;
}

/* Waits (by returning RETRY) or fails once the retries are spent. */
/* Transport retries: the first try and each of `limit` retries wait one timeout for an
 * acknowledgement, so the WR fails after limit + 1 timeouts. RNR: each NAK comes back at
 * once and `limit` retries follow, min_rnr_timer apart; 7 means for ever. */
static int retry(emu_qp *q, emu_send_wqe *w, uint64_t wait_ns, int limit, int status, uint64_t *wake) {
  int rnr = status == IBV_WC_RNR_RETRY_EXC_ERR;
  if (rnr && limit != 7 && w->tries >= limit) return fail(q, w, status);
  if (!rnr && w->tries > limit) return fail(q, w, status);
  w->tries++;
  w->retry_at_ns = emu_now_ns() + wait_ns;
  *wake = w->retry_at_ns;
  return RETRY;
}

static int take_recv(emu_qp_shared *r, emu_recv_wqe *out) {
  emu_lock(&r->lock);
  int ok = r->rq_head < r->rq_tail && r->state != IBV_QPS_ERR;
  if (ok) *out = r->rq[r->rq_head++ % EMU_MAX_RECV];
  pthread_mutex_unlock(&r->lock);
  return ok;
}

/* The local source: inline bytes or the SGEs. */
static int local_iov(const emu_send_wqe *w, struct iovec *iov) {
  if (w->flags & IBV_SEND_INLINE) {
    iov[0] = (struct iovec){(void *)w->inline_data, w->inline_len};
    return 1;
  }
  for (uint32_t i = 0; i < w->num_sge; i++)
    iov[i] = (struct iovec){(void *)(uintptr_t)w->sge[i].addr, w->sge[i].length};
  return (int)w->num_sge;
}

/* Writes len bytes into pid; 0, or the errno. */
static int write_remote(int32_t pid, struct iovec *liov, int nl, struct iovec *riov, int nr, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t k = process_vm_writev(pid, liov, (unsigned long)nl, riov, (unsigned long)nr, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return k < 0 ? errno : EFAULT;
    done += (size_t)k;
    if (done == len) break;
    /* A partial write: advance both vectors by k bytes. */
    for (size_t left = (size_t)k; left > 0; liov++, nl--) {
      size_t s = left < liov->iov_len ? left : liov->iov_len;
      if (s < liov->iov_len) { liov->iov_base = (char *)liov->iov_base + s; liov->iov_len -= s; break; }
      left -= s;
    }
    for (size_t left = (size_t)k; left > 0; riov++, nr--) {
      size_t s = left < riov->iov_len ? left : riov->iov_len;
      if (s < riov->iov_len) { riov->iov_base = (char *)riov->iov_base + s; riov->iov_len -= s; break; }
      left -= s;
    }
  }
  return 0;
}

static int status_of_errno(int e) {
  static int warned;
  if (e == EPERM && !warned++)
    fprintf(stderr, "weft verbs emulator: process_vm_writev: permission denied (ptrace access between "
                    "the processes is needed; see /proc/sys/kernel/yama/ptrace_scope)\n");
  return e == EFAULT ? IBV_WC_REM_ACCESS_ERR : IBV_WC_RETRY_EXC_ERR;
}

static uint32_t wqe_len(const emu_send_wqe *w) {
  if (w->flags & IBV_SEND_INLINE) return w->inline_len;
  uint32_t n = 0;
  for (uint32_t i = 0; i < w->num_sge; i++) n += w->sge[i].length;
  return n;
}

/* Step 1: every local SGE inside a region of the QP's PD (inline data needs none). */
static int local_ok(const emu_qp *q, const emu_send_wqe *w) {
  uint32_t pd = q->ctx->sh->qp[q->index].pd;
  if (w->flags & IBV_SEND_INLINE) return 1;
  for (uint32_t i = 0; i < w->num_sge; i++)
    if (emu_mr_check(q->ctx->sh, pd, w->sge[i].lkey, w->sge[i].addr, w->sge[i].length, 0) != 0) return 0;
  return 1;
}

/* Where the bytes go: the remote range of a write, or a SEND's receive SGEs, checked in the
 * responder's table. Returns the responder's status (IBV_WC_SUCCESS, or why it refuses). */
static int remote_iov(const emu_peer *p, const emu_qp_shared *r, const emu_send_wqe *w, const emu_recv_wqe *rw,
                      uint32_t len, int is_write, struct iovec *riov, int *nr) {
  *nr = 0;
  if (is_write) {
    riov[(*nr)++] = (struct iovec){(void *)(uintptr_t)w->remote_addr, len};
    return IBV_WC_SUCCESS;
  }
  uint64_t room = 0;
  for (uint32_t i = 0; i < rw->num_sge; i++) {
    if (emu_mr_check(p->sh, r->pd, rw->sge[i].lkey, rw->sge[i].addr, rw->sge[i].length, IBV_ACCESS_LOCAL_WRITE) != 0)
      return IBV_WC_LOC_PROT_ERR;
    riov[(*nr)++] = (struct iovec){(void *)(uintptr_t)rw->sge[i].addr, rw->sge[i].length};
    room += rw->sge[i].length;
  }
  return room < len ? IBV_WC_LOC_LEN_ERR : IBV_WC_SUCCESS;
}

/* Step 5's receive completion in the responder's CQ, after the data (RC ordering). */
static void recv_completion(const emu_qp *q, const emu_send_wqe *w, emu_peer *p, const emu_qp_shared *r,
                            const emu_recv_wqe *rw, uint32_t len, int status) {
  int is_write = w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  emu_cqe e = {.wr_id = rw->wr_id, .status = (uint32_t)status,
               .opcode = is_write ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV, .byte_len = len, .imm = w->imm,
               .qp_num = q->dest_qpn, .src_qp = q->qp.qp_num, .sq_seq = UINT64_MAX};
  if (is_write || w->opcode == IBV_WR_SEND_WITH_IMM) e.wc_flags = IBV_WC_WITH_IMM;
  emu_cq_push(p->sh, r->recv_cq, &e);
}

/* Runs the head WR w of q as far as it can: DONE, or RETRY with *wake the time to come back. */
static int execute(emu_qp *q, emu_send_wqe *w, uint64_t *wake) {
  uint64_t delay = emu_fault_delay_ns(), now = emu_now_ns();
  if (delay && now < w->post_ns + delay) return *wake = w->post_ns + delay, RETRY;
  if (w->retry_at_ns && now < w->retry_at_ns) return *wake = w->retry_at_ns, RETRY;
  if (q->qp.state == IBV_QPS_ERR || q->ctx->fatal) return complete(q, w, IBV_WC_WR_FLUSH_ERR, 0), DONE;
  int f = injected(q, w);
  if (f >= 0) return f;
  if (!local_ok(q, w)) return fail(q, w, IBV_WC_LOC_PROT_ERR);
  uint32_t len = wqe_len(w);
  uint64_t timeout_ns = 4096ull << (q->timeout ? q->timeout : 31);
  emu_peer *p = NULL;
  emu_qp_shared *r = responder(q, &p);
  if (r == NULL) return retry(q, w, timeout_ns, q->retry_cnt, IBV_WC_RETRY_EXC_ERR, wake);
  int is_write = w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  int needs_recv = w->opcode != IBV_WR_RDMA_WRITE;
  if (is_write && (!(r->access & IBV_ACCESS_REMOTE_WRITE) ||
                   (len > 0 && emu_mr_check(p->sh, r->pd, w->rkey, w->remote_addr, len, IBV_ACCESS_REMOTE_WRITE) != 0)))
    return fail(q, w, IBV_WC_REM_ACCESS_ERR);
  emu_recv_wqe rw = {0};
  if (needs_recv && !take_recv(r, &rw))
    return retry(q, w, 10000ull * rnr_10us[r->min_rnr_timer & 31], q->rnr_retry, IBV_WC_RNR_RETRY_EXC_ERR, wake);
  struct iovec liov[EMU_MAX_SGE], riov[EMU_MAX_SGE];
  int nl = local_iov(w, liov), nr;
  int rstatus = remote_iov(p, r, w, &rw, len, is_write, riov, &nr);
  int err = rstatus == IBV_WC_SUCCESS && len > 0 ? write_remote(p->pid, liov, nl, riov, nr, len) : 0;
  if (err == ESRCH) /* the target died (not yet reaped): no ACK comes, as for an absent QP */
    return retry(q, w, timeout_ns, q->retry_cnt, IBV_WC_RETRY_EXC_ERR, wake);
  if (needs_recv) recv_completion(q, w, p, r, &rw, len, err ? IBV_WC_WR_FLUSH_ERR : rstatus);
  if (err) return fail(q, w, status_of_errno(err));
  if (rstatus != IBV_WC_SUCCESS) return fail(q, w, IBV_WC_REM_INV_REQ_ERR);
  complete(q, w, IBV_WC_SUCCESS, len);
  return DONE;
}

/* One pass over the QPs; 1 when a WR finished. *wake: the earliest retry time. */
static int pass(emu_context *c, uint64_t *wake) {
  int progressed = 0;
  for (int i = 0; i < EMU_MAX_QP && !c->stopping; i++) {
    emu_qp *q = c->qps[i];
    if (q == NULL || q->sq_done == q->sq_posted) continue;
    emu_send_wqe *w = &q->sq[q->sq_done % q->max_send];
    c->executing = q;
    pthread_mutex_unlock(&c->lock);
    uint64_t at = UINT64_MAX;
    int r = execute(q, w, &at);
    pthread_mutex_lock(&c->lock);
    c->executing = NULL;
    pthread_cond_broadcast(&c->idle);
    if (r == DONE) {
      q->sq_done++;
      progressed = 1;
    } else if (at < *wake) {
      *wake = at;
    }
  }
  return progressed;
}

static void *worker_main(void *arg) {
  emu_context *c = arg;
  pthread_mutex_lock(&c->lock);
  while (!c->stopping) {
    uint64_t kicks = c->kicks, wake = UINT64_MAX;
    if (pass(c, &wake) || c->kicks != kicks) continue;
    if (wake == UINT64_MAX) {
      pthread_cond_wait(&c->work, &c->lock);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      uint64_t now = emu_now_ns(), d = wake > now ? wake - now : 0;
      uint64_t ns = (uint64_t)ts.tv_nsec + d % 1000000000ull;
      ts.tv_sec += (time_t)(d / 1000000000ull + ns / 1000000000ull);
      ts.tv_nsec = (long)(ns % 1000000000ull);
      pthread_cond_timedwait(&c->work, &c->lock, &ts);
    }
  }
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

void emu_worker_kick(emu_context *c) {
  pthread_mutex_lock(&c->lock);
  c->kicks++;
  if (!c->worker_started && !c->stopping)
    c->worker_started = pthread_create(&c->worker, NULL, worker_main, c) == 0;
  pthread_cond_signal(&c->work);
  pthread_mutex_unlock(&c->lock);
}

void emu_worker_stop(emu_context *c) {
  pthread_mutex_lock(&c->lock);
  c->stopping = 1;
  pthread_cond_signal(&c->work);
  int started = c->worker_started;
  pthread_mutex_unlock(&c->lock);
  if (started) pthread_join(c->worker, NULL);
}

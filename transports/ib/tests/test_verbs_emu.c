/* test_verbs_emu.c: the verbs emulator's semantics, between two real processes, through
 * weft's run-time loader (transports/ib/ibvwrap.c) exactly as the ib transport uses it.
 *
 * Each case forks two processes (tests/harness.c, no communicator): each opens the emulated
 * device, creates a PD, a CQ and an RC QP, registers a buffer, publishes (QP number, LID,
 * address, rkey) in the harness's shared page, connects INIT -> RTR -> RTS to the other's,
 * then plays its part. Every wait has a deadline. The parent points WEFT_IB_LIBRARY at
 * the emulator and WEFT_VERBS_EMU_DIR at a fresh directory, removed at the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "tests/harness.h"
#include "transports/ib/tests/verbs_emu_pair.h"

/* ---- write lands with no action of the target ---------------------------------------- */
static int body_write_lands(harness_rank *r) {
  emu_end e;
  size_t n = 1 << 20;
  if (emu_end_setup(r, &e, n, 16, 16, NULL) != 0) return r->failures;
  if (r->rank == 1) { /* the target: only waits, its CPU never touches verbs again */
    memset(e.buf, 0, n);
    harness_shared *s = r->shared;
    s->flags[10] = 1;
    if (!harness_wait_flag(r, 11, 1, 10000)) harness_fail(r, "the writer never said it was done");
    for (size_t i = 0; i < n; i++)
      if (e.buf[i] != (uint8_t)(i * 7 + 3)) {
        harness_fail(r, "byte %zu is %u after the peer's RDMA WRITE, expected %u", i, e.buf[i], (uint8_t)(i * 7 + 3));
        break;
      }
  } else {
    if (!harness_wait_flag(r, 10, 1, 10000)) harness_fail(r, "target not ready");
    for (size_t i = 0; i < n; i++) e.buf[i] = (uint8_t)(i * 7 + 3);
    struct ibv_wc wc;
    if (emu_end_write(&e, 0, n, e.peer_addr, e.peer_rkey, 0, 0, 1) != 0 || emu_end_poll(&e, &wc, 5000) != 1 ||
        wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RDMA_WRITE)
      harness_fail(r, "RDMA WRITE of %zu bytes did not complete with success", n);
    r->shared->flags[11] = 1;
  }
  emu_end_close(&e);
  return r->failures;
}

static void write_lands_in_peer_memory_without_the_peer_polling(void **state) {
  (void)state;
  emu_run(2, body_write_lands, NULL);
}

/* ---- WRITE_WITH_IMM: the receive completion comes after every byte ------------------- */
#define IMM_ROUNDS 20
static int body_imm_order(harness_rank *r) {
  emu_end e;
  size_t n = 4 << 20;
  if (emu_end_setup(r, &e, n, 64, 64, NULL) != 0) return r->failures;
  struct ibv_wc wc;
  for (int k = 0; k < IMM_ROUNDS && r->failures == 0; k++) {
    if (r->rank == 1) {
      if (emu_end_post_recv(&e, (uint64_t)k) != 0) harness_fail(r, "post_recv failed");
      r->shared->flags[20] = k + 1; /* receive posted */
      if (emu_end_poll(&e, &wc, 10000) != 1) { harness_fail(r, "round %d: no receive completion", k); break; }
      if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM) ||
          be32toh(wc.imm_data) != 1000u + (unsigned)k || wc.byte_len != n || wc.wr_id != (uint64_t)k)
        harness_fail(r, "round %d: completion status %d opcode %d imm %u len %u wr_id %llu", k, wc.status,
                     wc.opcode, be32toh(wc.imm_data), wc.byte_len, (unsigned long long)wc.wr_id);
      /* Every byte must be there the moment the completion is seen. */
      for (size_t i = 0; i < n; i += 4096 - 1)
        if (e.buf[i] != (uint8_t)(k + i)) { harness_fail(r, "round %d: byte %zu not yet written when the imm completed", k, i); break; }
      if (e.buf[n - 1] != (uint8_t)(k + n - 1)) harness_fail(r, "round %d: last byte not written", k);
      r->shared->flags[21] = k + 1;
    } else {
      for (size_t i = 0; i < n; i++) e.buf[i] = (uint8_t)(k + i);
      if (!harness_wait_flag(r, 20, k + 1, 10000)) { harness_fail(r, "peer never posted"); break; }
      if (emu_end_write(&e, 0, n, e.peer_addr, e.peer_rkey, 1, htobe32(1000u + (unsigned)k), 1) != 0 ||
          emu_end_poll(&e, &wc, 10000) != 1 || wc.status != IBV_WC_SUCCESS)
        harness_fail(r, "round %d: WRITE_WITH_IMM failed", k);
      if (!harness_wait_flag(r, 21, k + 1, 10000)) harness_fail(r, "peer never checked round %d", k);
    }
  }
  emu_end_close(&e);
  return r->failures;
}

static void write_with_imm_completes_only_after_its_data(void **state) {
  (void)state;
  emu_run(2, body_imm_order, NULL);
}

/* ---- SEND lands in the posted receive; one too small fails on both sides ------------- */
static int body_send(harness_rank *r) {
  emu_end e;
  if (emu_end_setup(r, &e, 8192, 16, 16, NULL) != 0) return r->failures;
  struct ibv_wc wc;
  if (r->rank == 1) {
    emu_end_post_recv_into(&e, 1, 1000, 3000);
    emu_end_post_recv_into(&e, 2, 0, 100); /* too small for the second SEND */
    r->shared->flags[12] = 1;
    if (emu_end_poll(&e, &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV ||
        wc.byte_len != 2500 || wc.wr_id != 1 || !(wc.wc_flags & IBV_WC_WITH_IMM) || wc.imm_data != 99)
      harness_fail(r, "SEND_WITH_IMM: status %d opcode %d len %u wr_id %llu", wc.status, wc.opcode, wc.byte_len,
                   (unsigned long long)wc.wr_id);
    for (size_t i = 0; i < 2500; i++)
      if (e.buf[1000 + i] != (uint8_t)(i ^ 0x5a)) { harness_fail(r, "SEND byte %zu wrong", i); break; }
    if (e.buf[999] != 0 || e.buf[3500] != 0) harness_fail(r, "SEND wrote outside its receive's range");
    if (emu_end_poll(&e, &wc, 5000) != 1 || wc.status != IBV_WC_LOC_LEN_ERR)
      harness_fail(r, "a 200-byte SEND into a 100-byte receive: status %d, expected local length error", wc.status);
    r->shared->flags[13] = 1;
  } else {
    for (size_t i = 0; i < 2500; i++) e.buf[i] = (uint8_t)(i ^ 0x5a);
    harness_wait_flag(r, 12, 1, 10000);
    if (emu_end_send(&e, 0, 2500, 1, 99) != 0 || emu_end_poll(&e, &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS ||
        wc.opcode != IBV_WC_SEND)
      harness_fail(r, "SEND failed (status %d)", wc.status);
    if (emu_end_send(&e, 0, 200, 0, 0) != 0 || emu_end_poll(&e, &wc, 5000) != 1 || wc.status != IBV_WC_REM_INV_REQ_ERR)
      harness_fail(r, "SEND into a too small receive: status %d, expected remote invalid request", wc.status);
    harness_wait_flag(r, 13, 1, 10000);
  }
  emu_end_close(&e);
  return r->failures;
}

static void send_lands_in_the_posted_receive_and_overflow_fails_both_sides(void **state) {
  (void)state;
  emu_run(2, body_send, NULL);
}

/* ---- remote access violations -------------------------------------------------------- */
typedef struct {
  int rkey_delta;     /* added to the peer's rkey */
  int64_t off;        /* offset from the peer's buffer */
  size_t len;
  int no_remote_write; /* the target registers without REMOTE_WRITE */
} violation;

static int body_violation(harness_rank *r) {
  const violation *v = r->arg;
  emu_end e;
  emu_end_opts o = {.access = v->no_remote_write ? IBV_ACCESS_LOCAL_WRITE : 0};
  if (emu_end_setup(r, &e, 8192, 16, 16, &o) != 0) return r->failures;
  if (r->rank == 0) {
    struct ibv_wc wc;
    uint64_t to = e.peer_addr + (uint64_t)v->off;
    if (emu_end_write(&e, 0, v->len, to, e.peer_rkey + (uint32_t)v->rkey_delta, 0, 0, 1) != 0)
      harness_fail(r, "post_send refused the WR");
    else if (emu_end_poll(&e, &wc, 5000) != 1 || wc.status != IBV_WC_REM_ACCESS_ERR)
      harness_fail(r, "expected a remote access error completion, got status %d", wc.status);
    /* The QP is now in error: the next WR is flushed. */
    if (emu_end_write(&e, 0, 8, e.peer_addr, e.peer_rkey, 0, 0, 1) != 0 || emu_end_poll(&e, &wc, 5000) != 1 ||
        wc.status != IBV_WC_WR_FLUSH_ERR)
      harness_fail(r, "the WR after the error was not flushed (status %d)", wc.status);
    r->shared->flags[30] = 1;
  } else {
    harness_wait_flag(r, 30, 1, 10000);
    for (size_t i = 0; i < 8192; i++)
      if (e.buf[i] != 0) { harness_fail(r, "byte %zu changed by a write that was refused", i); break; }
  }
  emu_end_close(&e);
  return r->failures;
}

static void remote_access_error_for_a_wrong_rkey(void **state) {
  (void)state;
  violation v = {.rkey_delta = 1 << 8, .len = 64};
  emu_run(2, body_violation, &v);
}

static void remote_access_error_past_the_region_end(void **state) {
  (void)state;
  violation v = {.off = 8192 - 32, .len = 64};
  emu_run(2, body_violation, &v);
}

static void remote_access_error_before_the_region_start(void **state) {
  (void)state;
  violation v = {.off = -8, .len = 16};
  emu_run(2, body_violation, &v);
}

static void remote_access_error_without_remote_write_access(void **state) {
  (void)state;
  violation v = {.len = 64, .no_remote_write = 1};
  emu_run(2, body_violation, &v);
}

/* ---- finite queues --------------------------------------------------------------------- */
static int body_queues(harness_rank *r) {
  emu_end e;
  if (emu_end_setup(r, &e, 4096, 4, 2, NULL) != 0) return r->failures;
  if (r->rank == 1) {
    if (emu_end_post_recv(&e, 1) != 0 || emu_end_post_recv(&e, 2) != 0) harness_fail(r, "2 receives on a 2-deep queue");
    if (emu_end_post_recv(&e, 3) != ENOMEM) harness_fail(r, "a third receive on a 2-deep queue was not refused with ENOMEM");
    r->shared->flags[40] = 1;
    harness_wait_flag(r, 41, 1, 10000);
  } else {
    harness_wait_flag(r, 40, 1, 10000);
    /* Four unsignalled writes fill a 4-deep send queue until a signalled one is polled. */
    for (int i = 0; i < 3; i++)
      if (emu_end_write(&e, 0, 8, e.peer_addr, e.peer_rkey, 0, 0, 0) != 0) harness_fail(r, "write %d refused", i);
    if (emu_end_write(&e, 0, 8, e.peer_addr, e.peer_rkey, 0, 0, 1) != 0) harness_fail(r, "4th write refused");
    if (emu_end_write(&e, 0, 8, e.peer_addr, e.peer_rkey, 0, 0, 1) != ENOMEM)
      harness_fail(r, "a 5th WR on a 4-deep send queue was not refused with ENOMEM");
    struct ibv_wc wc;
    if (emu_end_poll(&e, &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS) harness_fail(r, "no completion");
    if (emu_end_write(&e, 0, 8, e.peer_addr, e.peer_rkey, 0, 0, 1) != 0)
      harness_fail(r, "the send queue stayed full after its signalled completion was polled");
    if (emu_end_poll(&e, &wc, 5000) != 1) harness_fail(r, "no completion for the last write");
    r->shared->flags[41] = 1;
  }
  emu_end_close(&e);
  return r->failures;
}

static void queues_are_finite_and_refuse_with_enomem(void **state) {
  (void)state;
  emu_run(2, body_queues, NULL);
}

/* ---- receiver not ready ------------------------------------------------------------------ */
typedef struct {
  int rnr_retry;
  int post_late_ms; /* the target posts its receive this late (-1: never) */
} rnr_case;

static int body_rnr(harness_rank *r) {
  const rnr_case *rc = r->arg;
  emu_end e;
  emu_end_opts o = {.rnr_retry = (uint8_t)rc->rnr_retry, .set_rnr = 1};
  if (emu_end_setup(r, &e, 4096, 4, 4, &o) != 0) return r->failures;
  struct ibv_wc wc;
  if (r->rank == 1) {
    if (rc->post_late_ms >= 0) {
      usleep((useconds_t)rc->post_late_ms * 1000);
      emu_end_post_recv(&e, 5);
      if (emu_end_poll(&e, &wc, 10000) != 1 || wc.status != IBV_WC_SUCCESS)
        harness_fail(r, "the late receive did not complete");
    }
    harness_wait_flag(r, 50, 1, 10000);
  } else {
    double t0 = harness_now_ms();
    emu_end_write(&e, 0, 16, e.peer_addr, e.peer_rkey, 1, 7, 1);
    if (emu_end_poll(&e, &wc, 10000) != 1) harness_fail(r, "no completion at all");
    else if (rc->post_late_ms < 0 && wc.status != IBV_WC_RNR_RETRY_EXC_ERR)
      harness_fail(r, "expected RNR retry exceeded, got %d", wc.status);
    else if (rc->post_late_ms >= 0 && wc.status != IBV_WC_SUCCESS)
      harness_fail(r, "expected success once the receive was posted, got %d", wc.status);
    harness_note(r, "completion after %.1f ms", harness_now_ms() - t0);
    r->shared->flags[50] = 1;
  }
  emu_end_close(&e);
  return r->failures;
}

static void rnr_retry_exceeded_when_no_receive_is_posted(void **state) {
  (void)state;
  rnr_case c = {.rnr_retry = 2, .post_late_ms = -1};
  emu_run(2, body_rnr, &c);
}

static void rnr_retry_7_waits_until_the_receive_is_posted(void **state) {
  (void)state;
  rnr_case c = {.rnr_retry = 7, .post_late_ms = 200};
  emu_run(2, body_rnr, &c);
}

/* ---- unreachable and dead peers: transport retries, then RETRY_EXC_ERR ---------------- */
static int body_unreachable(harness_rank *r) {
  int dead = *(int *)r->arg;
  emu_end e;
  emu_end_opts o = {.wrong_lid = !dead};
  if (emu_end_setup(r, &e, 4096, 4, 4, &o) != 0) return r->failures;
  if (r->rank == 1) {
    if (dead) _exit(0); /* gone without a word, as a crashed peer */
    harness_wait_flag(r, 60, 1, 10000);
  } else {
    if (dead) usleep(100 * 1000);
    struct ibv_wc wc;
    double t0 = harness_now_ms();
    emu_end_write(&e, 0, 16, e.peer_addr, e.peer_rkey, 0, 0, 1);
    if (emu_end_poll(&e, &wc, 10000) != 1 || wc.status != IBV_WC_RETRY_EXC_ERR)
      harness_fail(r, "expected transport retry counter exceeded, got %d", wc.status);
    double ms = harness_now_ms() - t0;
    /* timeout 12: 16.8 ms per try, 3 tries */
    if (ms < 40) harness_fail(r, "gave up after %.1f ms, before its retries (3 x 16.8 ms)", ms);
    r->shared->flags[60] = 1;
  }
  emu_end_close(&e);
  return r->failures;
}

static void retry_exceeded_for_a_wrong_destination_lid(void **state) {
  (void)state;
  int dead = 0;
  emu_run(2, body_unreachable, &dead);
}

static void retry_exceeded_when_the_peer_process_died(void **state) {
  (void)state;
  int dead = 1;
  emu_run(2, body_unreachable, &dead);
}

/* ---- the QP state machine requires the spec's attributes ------------------------------ */
static int body_state_machine(harness_rank *r) {
  emu_end e;
  emu_end_opts o = {.no_connect = 1};
  if (emu_end_setup(r, &e, 4096, 4, 4, &o) != 0) return r->failures;
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
  if (e.ibv->modify_qp(e.qp, &a, IBV_QP_STATE | IBV_QP_PORT) == 0)
    harness_fail(r, "RESET->INIT without the access flags and pkey index was accepted");
  a.qp_state = IBV_QPS_RTR;
  if (e.ibv->modify_qp(e.qp, &a, IBV_QP_STATE) == 0) harness_fail(r, "RESET->RTR was accepted");
  struct ibv_send_wr wr = {.opcode = IBV_WR_RDMA_WRITE}, *bad;
  if (weft__ibv_post_send(e.qp, &wr, &bad) == 0) harness_fail(r, "post_send in RESET was accepted");
  emu_end_close(&e);
  return r->failures;
}

static void qp_transitions_require_the_spec_attributes(void **state) {
  (void)state;
  emu_run(1, body_state_machine, NULL);
}

/* ---- fault injection ------------------------------------------------------------------- */
typedef struct {
  const char *fault;
  int expect_status;      /* of the faulted WR (the 2nd) */
  int expect_event;       /* an async event the device must raise, -1 none */
} fault_case;

static int body_fault(harness_rank *r) {
  const fault_case *f = r->arg;
  if (r->rank == 0) setenv("WEFT_VERBS_EMU_FAULT", f->fault, 1);
  emu_end e;
  if (emu_end_setup(r, &e, 4096, 8, 8, NULL) != 0) return r->failures;
  if (r->rank == 0) {
    struct ibv_wc wc;
    int st[3] = {-1, -1, -1};
    for (int i = 0; i < 3; i++) {
      emu_end_write(&e, 0, 16, e.peer_addr, e.peer_rkey, 0, 0, 1);
      if (emu_end_poll(&e, &wc, 5000) == 1) st[i] = wc.status;
    }
    int want_after = IBV_WC_WR_FLUSH_ERR;
    if (st[0] != IBV_WC_SUCCESS || st[1] != f->expect_status || st[2] != want_after)
      harness_fail(r, "%s: statuses %d %d %d, expected 0 %d %d", f->fault, st[0], st[1], st[2], f->expect_status, want_after);
    if (e.qp->state != IBV_QPS_ERR) harness_fail(r, "%s: QP not in the error state", f->fault);
    if (f->expect_event >= 0) {
      struct ibv_async_event ev;
      if (!emu_end_async_event(&e, &ev, 5000)) harness_fail(r, "%s: no async event", f->fault);
      else if ((int)ev.event_type != f->expect_event)
        harness_fail(r, "%s: async event %d, expected %d", f->fault, ev.event_type, f->expect_event);
    }
    r->shared->flags[62] = 1;
  } else {
    harness_wait_flag(r, 62, 1, 10000);
  }
  emu_end_close(&e);
  return r->failures;
}

static void fault_fails_the_nth_wr_with_the_chosen_status(void **state) {
  (void)state;
  fault_case f = {"wr=2:rem_op", IBV_WC_REM_OP_ERR, -1};
  emu_run(2, body_fault, &f);
}

static void fault_moves_the_qp_to_error(void **state) {
  (void)state;
  fault_case f = {"qp_error=2", IBV_WC_WR_FLUSH_ERR, -1};
  emu_run(2, body_fault, &f);
}

static void fault_raises_a_fatal_async_event(void **state) {
  (void)state;
  fault_case f = {"fatal=2", IBV_WC_WR_FLUSH_ERR, IBV_EVENT_DEVICE_FATAL};
  emu_run(2, body_fault, &f);
}

static int body_delay(harness_rank *r) {
  if (r->rank == 0) setenv("WEFT_VERBS_EMU_FAULT", "delay_us=150000", 1);
  emu_end e;
  if (emu_end_setup(r, &e, 4096, 8, 8, NULL) != 0) return r->failures;
  if (r->rank == 0) {
    struct ibv_wc wc;
    double t0 = harness_now_ms();
    emu_end_write(&e, 0, 16, e.peer_addr, e.peer_rkey, 0, 0, 1);
    if (emu_end_poll(&e, &wc, 100) != 0) harness_fail(r, "completed within 100 ms despite delay_us=150000");
    if (emu_end_poll(&e, &wc, 5000) != 1 || wc.status != IBV_WC_SUCCESS) harness_fail(r, "delayed WR never completed");
    double ms = harness_now_ms() - t0;
    if (ms < 150) harness_fail(r, "completed after %.1f ms, before the 150 ms delay", ms);
    r->shared->flags[63] = 1;
  } else {
    harness_wait_flag(r, 63, 1, 10000);
  }
  emu_end_close(&e);
  return r->failures;
}

static void fault_delays_completions(void **state) {
  (void)state;
  emu_run(2, body_delay, NULL);
}

/* ---- devices from the environment ------------------------------------------------------ */
static int body_devices(harness_rank *r) {
  const weft__ibv *ibv = weft__ibv_get(NULL);
  if (ibv == NULL) return harness_fail(r, "emulator not loaded");
  int n = 0;
  struct ibv_device **list = ibv->get_device_list(&n);
  if (n != 2) harness_fail(r, "%d devices, expected 2", n);
  for (int i = 0; i < n && i < 2; i++) {
    struct ibv_context *ctx = ibv->open_device(list[i]);
    struct ibv_port_attr pa;
    union ibv_gid gid;
    if (ctx == NULL || weft__ibv_query_port(ibv, ctx, 1, &pa) != 0) { harness_fail(r, "cannot open device %d", i); continue; }
    int want_ll = i == 0 ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
    if (pa.link_layer != want_ll || pa.state != IBV_PORT_ACTIVE) harness_fail(r, "device %d: link layer %d", i, pa.link_layer);
    if (i == 0 && (pa.lid != 77 || pa.active_speed != 64 || pa.active_width != 2))
      harness_fail(r, "device 0: lid %u speed %u width %u, expected 77, HDR, 4x", pa.lid, pa.active_speed, pa.active_width);
    if (i == 1 && (ibv->query_gid(ctx, 1, 1, &gid) != 0 || gid.raw[10] != 0xff || gid.raw[12] != 192 || gid.raw[15] != 7))
      harness_fail(r, "device 1: GID index 1 is not ::ffff:192.168.0.7");
    if (i == 1) { /* its sysfs-like tree gives the NUMA node of its PCI function */
      char path[600], real[4096];
      snprintf(path, sizeof(path), "%s/device", list[i]->ibdev_path);
      FILE *f = realpath(path, real) ? fopen(strcat(real, "/numa_node"), "r") : NULL;
      int numa = -5;
      if (f == NULL || fscanf(f, "%d", &numa) != 1 || numa != 1) harness_fail(r, "device 1: numa_node %d, expected 1", numa);
      if (f) fclose(f);
      if (strstr(real, "0000:c1:00.0") == NULL) harness_fail(r, "device 1: PCI path %s", real);
    }
    ibv->close_device(ctx);
  }
  ibv->free_device_list(list);
  return r->failures;
}

static void devices_ports_and_gids_come_from_the_environment(void **state) {
  (void)state;
  setenv("WEFT_VERBS_EMU_DEVICES", "emu_ib,lid=77,speed=200,numa=0,pci=0000:81:00.0;"
                                   "emu_roce,link=roce,gid=192.168.0.7,numa=1,pci=0000:c1:00.0", 1);
  emu_run(1, body_devices, NULL);
  unsetenv("WEFT_VERBS_EMU_DEVICES");
}

int main(void) {
  harness_filter_from_env();
  int rc;
  if (!emu_test_begin(&rc)) return rc;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(write_lands_in_peer_memory_without_the_peer_polling),
      cmocka_unit_test(write_with_imm_completes_only_after_its_data),
      cmocka_unit_test(send_lands_in_the_posted_receive_and_overflow_fails_both_sides),
      cmocka_unit_test(remote_access_error_for_a_wrong_rkey),
      cmocka_unit_test(remote_access_error_past_the_region_end),
      cmocka_unit_test(remote_access_error_before_the_region_start),
      cmocka_unit_test(remote_access_error_without_remote_write_access),
      cmocka_unit_test(queues_are_finite_and_refuse_with_enomem),
      cmocka_unit_test(rnr_retry_exceeded_when_no_receive_is_posted),
      cmocka_unit_test(rnr_retry_7_waits_until_the_receive_is_posted),
      cmocka_unit_test(retry_exceeded_for_a_wrong_destination_lid),
      cmocka_unit_test(retry_exceeded_when_the_peer_process_died),
      cmocka_unit_test(qp_transitions_require_the_spec_attributes),
      cmocka_unit_test(fault_fails_the_nth_wr_with_the_chosen_status),
      cmocka_unit_test(fault_moves_the_qp_to_error),
      cmocka_unit_test(fault_raises_a_fatal_async_event),
      cmocka_unit_test(fault_delays_completions),
      cmocka_unit_test(devices_ports_and_gids_come_from_the_environment),
  };
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  emu_test_teardown();
  return rc;
}

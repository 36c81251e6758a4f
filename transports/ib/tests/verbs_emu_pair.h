/* verbs_emu_pair.h: two processes joined by one RC queue pair over the verbs emulator, for
 * tests/test_verbs_emu.c. Each end publishes (QP number, LID, GID, buffer address, rkey)
 * in the harness's shared page and reads the other's from it. */
#ifndef WEFT_TESTS_VERBS_EMU_PAIR_H
#define WEFT_TESTS_VERBS_EMU_PAIR_H
#include <stdint.h>
#include "tests/harness.h"
#include "transports/ib/ibvwrap.h"

typedef struct {
  int access;          /* the buffer's access flags; 0: local + remote write */
  uint8_t rnr_retry;   /* with set_rnr; default 7 */
  int set_rnr;
  int wrong_lid;       /* connect to the peer's LID + 1 (unreachable) */
  int no_connect;      /* leave the QP in RESET */
} emu_end_opts;

typedef struct {
  const weft__ibv *ibv;
  struct ibv_device **list;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;
  uint8_t *buf;
  size_t bytes;
  uint64_t peer_addr;
  uint32_t peer_rkey;
} emu_end;

/* The start of each ib test program's main(): points weft at the emulator with a fresh
 * state directory (harness_verbs_emu_setup, tag "ib-test") and checks the library loads.
 * Returns 1 to go on; 0 after printing TAP's "1..0 # SKIP why" (emulator not built; *rc = 0)
 * or "Bail out! why" (built but does not load; *rc = 1): main then returns *rc. Call from
 * main before any rank is forked; emu_test_teardown at the end removes the directory. */
int emu_test_begin(int *rc);
void emu_test_teardown(void);
/* harness_run of n processes without a communicator, 60 s deadline. */
void emu_run(int n, harness_body_fn body, void *arg);

/* Opens, registers bytes, publishes, waits for the peer (when there is one) and connects.
 * 0, or -1 after harness_fail. */
int emu_end_setup(harness_rank *r, emu_end *e, size_t bytes, int max_send, int max_recv,
                  const emu_end_opts *opts);
/* An RDMA WRITE (with_imm: WRITE_WITH_IMM carrying imm) of buf[off, off+len). post_send's rc. */
int emu_end_write(emu_end *e, size_t off, size_t len, uint64_t raddr, uint32_t rkey, int with_imm,
                  uint32_t imm, int signaled);
int emu_end_post_recv(emu_end *e, uint64_t wr_id);
/* A receive whose data (of a SEND) goes to buf[off, off+len). */
int emu_end_post_recv_into(emu_end *e, uint64_t wr_id, size_t off, size_t len);
/* A SEND (with_imm: SEND_WITH_IMM) of buf[off, off+len), signalled. */
int emu_end_send(emu_end *e, size_t off, size_t len, int with_imm, uint32_t imm);
/* One completion within timeout_ms: 1, 0 (none), -1 (poll failed). Sleeps between polls. */
int emu_end_poll(emu_end *e, struct ibv_wc *wc, int timeout_ms);
/* One async event within timeout_ms: 1 or 0. */
int emu_end_async_event(emu_end *e, struct ibv_async_event *ev, int timeout_ms);
void emu_end_close(emu_end *e);
#endif

/* ib_comm.h: the engine's comms and requests, shared by ib_connect.c (set-up, close) and
 * ib_p2p.c (data path). Internal to transports/ib/. */
#ifndef WEFT_IB_COMM_H
#define WEFT_IB_COMM_H
#include "transports/ib/ib_config.h"
#include "transports/ib/ib_net.h"

/* One clear-to-send entry, written by the receiver into the sender's FIFO. idx (the
 * receive's sequence + 1) is last: the sender reads the rest only after seeing it. */
typedef struct {
  uint64_t addr;
  uint32_t rkey;
  uint32_t size;
  uint32_t tag;
  uint32_t pad;
  uint64_t idx;
} weft__ib_cts;

typedef struct ib_comm ib_comm;

struct weft__ib_request {
  ib_comm *comm;
  int in_use;
  int events;             /* completions still to come */
  uint64_t seq;
  size_t size;            /* posted size; for receives the received size once known */
  uint64_t post_ns;
};

struct ib_comm {
  int is_send;
  weft__ib_dev *dev;
  char self[32], peer[64];
  uint8_t secret[16];     /* the sender checks the accept handle with it */
  int timeout_ms;
  struct ibv_cq *cq;
  int nqps;
  struct ibv_qp *qp[WEFT__IB_MAX_QPS];
  uint32_t qpn[WEFT__IB_MAX_QPS];
  uint32_t remote_qpn[WEFT__IB_MAX_QPS];
  weft_status_t failed;   /* sticky */
  char err[1024];
  uint64_t seq;           /* next request */
  weft__ib_request reqs[WEFT__IB_MAX_REQUESTS];
};

struct weft__ib_send_comm {
  ib_comm c;
  weft__ib_cts *fifo;     /* [WEFT__IB_MAX_REQUESTS], written by the receiver */
  struct ibv_mr *fifo_mr;
  uint64_t nonce;         /* of our connect handle: the accept handle must answer it */
  uint64_t cts_wait_since;
  int connected;
};

struct weft__ib_recv_comm {
  ib_comm c;
  uint64_t fifo_addr;     /* the sender's FIFO */
  uint32_t fifo_rkey;
};

struct weft__ib_listen_comm {
  weft__ib_dev *dev;
  uint64_t nonce;
};

/* Records the comm's first error ("ib: SELF: peer PEER (DEV:PORT -> QP N): message") and
 * raises it; later calls re-raise it quietly (weft__ib_comm_error). */
weft_status_t weft__ib_comm_fail(ib_comm *c, weft_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
weft_status_t weft__ib_comm_error(ib_comm *c);

/* wr_id: request slot (bits 0-7), kind (8-9: data / clear-to-send), QP index (16-23),
 * request sequence (32-63). */
enum { WEFT__IB_WR_DATA = 0, WEFT__IB_WR_CTS = 1 };
static inline uint64_t weft__ib_wr_id(int slot, int kind, int q, uint64_t seq) {
  return (uint64_t)slot | (uint64_t)kind << 8 | (uint64_t)q << 16 | seq << 32;
}
#endif

/* emu.h: internals of weft's verbs emulator (libweft_verbs_emu.so), a test tool that stands in
 * for libibverbs on machines without an RDMA device. It is not a model of InfiniBand speed.
 *
 * What it emulates, and how:
 *   - Devices and ports from WEFT_VERBS_EMU_DEVICES (emu_config.c): name, ports, link layer
 *     (IB or RoCE), LID, GIDs, speed, NUMA node and PCI address, with a small sysfs-like tree
 *     (ibdev_path/device -> .../numa_node) so that the same discovery code reads real HCAs
 *     and emulated ones.
 *   - Every opened context owns one shared file, DIR/ctx-SLOT (DIR = WEFT_VERBS_EMU_DIR,
 *     default /dev/shm/weft-verbs-emu), holding its memory-region table, its completion
 *     queues and the receive queues of its queue pairs. /dev/shm is shared across network
 *     namespaces, so the emulated hosts of the multi-host tests reach each other. A QP
 *     number is SLOT << 8 | index: a peer finds the file from the number alone.
 *   - The requester does all the work, as an HCA does: a per-context worker thread
 *     (emu_worker.c) takes the send queues in order, checks the target's rkey, bounds and
 *     access flags in the target's file, writes the bytes straight into the target process
 *     with process_vm_writev (the target's CPU does nothing), then pushes the receive
 *     completion (WRITE_WITH_IMM, SEND) into the target's completion queue: a completion is
 *     visible only after its data (RC ordering), and the requester's own completion comes
 *     last.
 *   - Queue depths are finite (ENOMEM when full); an empty receive queue is a
 *     receiver-not-ready, retried rnr_retry times (7: for ever) min_rnr_timer apart;
 *     an unreachable, absent or dead peer QP is retried retry_cnt times, timeout apart, as
 *     the IB transport timer does (4.096 us * 2^timeout).
 *   - Faults by WEFT_VERBS_EMU_FAULT (emu_fault.c).
 * ibv_poll_cq, ibv_post_send and ibv_post_recv are static inlines in verbs.h that call
 * through ibv_context.ops; the emulator fills those ops as a real provider does, and weft's
 * wrapper (transports/ib/ibvwrap.c) calls through them the same way. */
#ifndef WEFT_VERBS_EMU_H
#define WEFT_VERBS_EMU_H
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>

#define EMU_MAGIC 0x77656d75u /* "wemu" */
#define EMU_MAX_DEVICES 8
#define EMU_MAX_PORTS 2
#define EMU_MAX_GIDS 2
#define EMU_MAX_MR 4096
#define EMU_MAX_CQ 32
#define EMU_MAX_CQE 4096
#define EMU_MAX_QP 256        /* per context: the low 8 bits of a QP number */
#define EMU_MAX_SLOTS 65535   /* contexts on one fabric: the high 16 bits */
#define EMU_MAX_RECV 1024     /* receive queue depth */
#define EMU_MAX_SEND 4096     /* send queue depth */
#define EMU_MAX_SGE 4
#define EMU_MAX_INLINE 256
#define EMU_MAX_MSG (1u << 31)

/* Only the verbs entry points are exported; the emulator's own functions stay inside. */
#pragma GCC visibility push(hidden)

/* ---- configuration (emu_device.c) ---- */
typedef struct {
  int ib;                      /* 1: InfiniBand, 0: Ethernet (RoCE) */
  uint16_t lid;                /* IB only */
  int ngids;
  union ibv_gid gid[EMU_MAX_GIDS];
  uint8_t active_speed, active_width; /* ibv_port_attr encodings */
  int speed_gbps;
} emu_port_cfg;

typedef struct {
  char name[64];
  int nports;
  emu_port_cfg port[EMU_MAX_PORTS];
  int numa;
  char pci[16];                /* "0000:81:00.0" */
  uint64_t guid;
} emu_device_cfg;

/* ---- the shared file of one context ---- */
typedef struct {
  uint32_t valid, pd, access;
  uint32_t key;                /* lkey == rkey: index << 8 | generation */
  uint64_t addr, length;
} emu_mr_entry;

typedef struct {
  uint64_t wr_id;
  uint32_t status, opcode, byte_len, imm, qp_num, src_qp, wc_flags, vendor_err;
  uint64_t sq_seq;             /* requester completions: which send WR this retires */
} emu_cqe;

typedef struct {
  pthread_mutex_t lock;        /* robust, process-shared */
  uint32_t in_use, size, overrun, pad;
  uint64_t head, tail;         /* consumer, producer */
  emu_cqe ring[EMU_MAX_CQE];
} emu_cq_shared;

typedef struct {
  uint64_t wr_id;
  uint32_t num_sge, pad;
  struct ibv_sge sge[EMU_MAX_SGE];
} emu_recv_wqe;

typedef struct {
  pthread_mutex_t lock;        /* robust, process-shared */
  uint32_t in_use, gen, state, access, pd, recv_cq, max_recv, min_rnr_timer, port;
  uint64_t rq_head, rq_tail;
  emu_recv_wqe rq[EMU_MAX_RECV];
} emu_qp_shared;

typedef struct {
  uint32_t magic, slot;
  int32_t pid;
  uint32_t pad;
  uint64_t nonce;
  int nports;
  emu_port_cfg port[EMU_MAX_PORTS];
  emu_mr_entry mr[EMU_MAX_MR];
  emu_cq_shared cq[EMU_MAX_CQ];
  emu_qp_shared qp[EMU_MAX_QP];
} emu_shared;

/* ---- process-local objects ---- */
typedef struct emu_send_wqe {
  uint64_t wr_id, seq, post_ns;
  uint32_t opcode, flags, imm, rkey, num_sge;
  uint64_t remote_addr;
  struct ibv_sge sge[EMU_MAX_SGE];
  uint32_t inline_len;
  uint8_t inline_data[EMU_MAX_INLINE];
  int fault;                   /* emu_fault_kind */
  int fault_status;
  /* Progress of the head WR across retries. */
  int tries;
  uint64_t retry_at_ns, first_ns;
} emu_send_wqe;

struct emu_context;

typedef struct emu_qp {
  struct ibv_qp qp;
  struct emu_context *ctx;
  uint32_t index;
  /* Attributes. */
  uint32_t max_send, max_recv, max_sge, max_inline, sq_sig_all;
  uint8_t timeout, retry_cnt, rnr_retry, port;
  uint32_t dest_qpn;
  int av_ib;                    /* the address vector names a LID (1) or a GID (0) */
  uint16_t dlid;
  union ibv_gid dgid;
  /* Send queue (worker consumes; poll_cq retires). */
  emu_send_wqe *sq;
  uint64_t sq_posted, sq_done, sq_retired;
  /* The peer, resolved at RTR. */
  struct emu_peer *peer;
  uint32_t peer_gen;
} emu_qp;

typedef struct emu_cq {
  struct ibv_cq cq;
  uint32_t index;
} emu_cq;

typedef struct emu_peer {
  uint32_t slot;
  int32_t pid;
  uint64_t nonce;
  emu_shared *sh;
  struct emu_peer *next;
} emu_peer;

typedef struct emu_event {
  struct ibv_async_event ev;
  struct emu_event *next;
} emu_event;

typedef struct emu_context {
  struct ibv_context ctx;       /* what the user sees */
  const emu_device_cfg *dev;
  emu_shared *sh;
  int fd;
  uint32_t slot;
  char path[320];
  pthread_mutex_t lock;         /* everything process-local below, and the SQs */
  pthread_cond_t work;
  pthread_t worker;
  int worker_started, stopping;
  uint64_t kicks;               /* posts and state changes since start: no lost wake-up */
  struct emu_qp *executing;     /* the QP whose head WR the worker runs without the lock */
  pthread_cond_t idle;          /* signalled when executing is cleared */
  emu_qp *qps[EMU_MAX_QP];
  emu_peer *peers;
  int async_pipe[2];
  emu_event *events, *events_tail;
  int fatal;
} emu_context;

/* emu_config.c */
const emu_device_cfg *emu_devices(int *n);
const char *emu_dir(void);
uint64_t emu_now_ns(void);
void emu_mkdirs(const char *path);
/* Makes DIR/sys-HOST/class/infiniband/NAME (ibdev_path) with device -> the PCI function's
 * directory holding numa_node, when the device has a PCI address. */
void emu_make_sysfs(const emu_device_cfg *d, char *ibdev_path, size_t len);

/* emu_device.c */
void emu_raise_event(emu_context *c, enum ibv_event_type type, struct ibv_qp *qp, int port);
void emu_lock(pthread_mutex_t *m);   /* robust lock: recovers from a dead owner */
void emu_init_shared_mutex(pthread_mutex_t *m);
static inline emu_context *emu_ctx(struct ibv_context *c) { return (emu_context *)c; }

/* emu_mr.c */
int emu_mr_check(const emu_shared *sh, uint32_t pd, uint32_t key, uint64_t addr, uint64_t len,
                 uint32_t need_access);

/* emu_cq.c */
/* Appends a completion to cq index of sh; 0, or -1 when the CQ is full (overrun set). */
int emu_cq_push(emu_shared *sh, uint32_t cq, const emu_cqe *e);
int emu_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int emu_req_notify_cq(struct ibv_cq *cq, int solicited_only);

/* emu_qp.c */
int emu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int emu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* Moves q to the error state: flushes its receive queue now; the worker flushes the SQ. */
void emu_qp_to_error(emu_qp *q);
emu_peer *emu_peer_map(emu_context *c, uint32_t slot);

/* emu_worker.c */
void emu_worker_kick(emu_context *c);
void emu_worker_stop(emu_context *c);

/* emu_fault.c */
enum { EMU_FAULT_NONE = 0, EMU_FAULT_WR_STATUS, EMU_FAULT_QP_ERROR, EMU_FAULT_FATAL };
/* For the next posted send WR (1-based count over the process): which fault, if any. */
int emu_fault_for_next_wr(int *status);
/* Microseconds every completion is delayed (WEFT_VERBS_EMU_FAULT delay_us=D), 0 none. */
uint64_t emu_fault_delay_ns(void);
#pragma GCC visibility pop
#endif

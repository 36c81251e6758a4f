/* ib_net.h: the net_ib protocol engine, with an internal API shaped like NCCL's net plugin
 * (listen / connect / accept, regMr / deregMr, isend / irecv / test, close), for the ib
 * transport to sit on behind weft's transport interface.
 *
 * Connection set-up (the caller moves the handles out of band, e.g. over the bootstrap):
 *   receiver: weft__ib_listen(port)            -> listen handle L    (to the sender)
 *   sender:   weft__ib_connect(port, L)        -> connect handle C   (to the receiver)
 *   receiver: weft__ib_accept(listen comm, C)  -> accept handle A    (to the sender); ready
 *   sender:   weft__ib_connect_finish(A)                                            ; ready
 * None of these blocks. A handle is WEFT__IB_HANDLE_BYTES of plain data (host byte order:
 * both ends run the same weft on the same architecture) carrying the QP numbers, LID or GID,
 * MTU, the sender's clear-to-send FIFO address and rkey, a label of its maker, the nonce of
 * the handle it answers, and a SipHash-2-4 MAC keyed by the job's 128-bit secret: a handle
 * that does not prove the secret, or answers another handle, is refused (WEFT_ERR_AUTH)
 * before anything in it is used. QPs are RC, moved INIT -> RTR -> RTS; WEFT_IB_TIMEOUT,
 * WEFT_IB_RETRY_CNT and WEFT_IB_QPS_PER_CONNECTION apply.
 *
 * Data path (NCCL's net_ib protocol, src/transport/net_ib/: the receiver drives):
 *   - irecv posts a receive WQE on every QP of the connection, then RDMA WRITEs (inline) one
 *     clear-to-send entry {address, size, rkey, tag, sequence} into the sender's FIFO slot
 *     sequence % WEFT__IB_MAX_REQUESTS;
 *   - isend waits (returns no request) until its slot holds its sequence, then RDMA WRITEs the
 *     data, split over the QPs in 128-byte-aligned chunks, each chunk's write carrying the
 *     total size as immediate data (RDMA_WRITE_WITH_IMM), so each QP consumes one receive;
 *   - a receive completes when every QP's immediate arrived (RC: after its data); a zero-byte
 *     message still consumes the immediates. A send completes when its writes did.
 * At most WEFT__IB_MAX_REQUESTS requests are outstanding per comm and direction; messages
 * are 0 .. 2^31 - 1 bytes. A sender may send fewer bytes than the receiver posted (test
 * reports the size), not more.
 *
 * Errors name this side, the peer, the operation and its sequence number, and for a failed
 * completion the verbs status string, e.g. "ib: rank 0: peer rank 1 (weftemu0:1 -> QP 70401):
 * send #3 (4096 bytes, RDMA write with immediate on QP 0 of 1) failed: remote access error
 * (status 10, vendor error 0x0)". After an error every call on the comm returns it again.
 * Every wait has a deadline: a send whose clear-to-send, or a request whose completion, does
 * not come within the comm's timeout fails with WEFT_ERR_TIMEOUT; an error event of the HCA
 * (the async thread) fails every comm on it.
 * Thread safety: one thread per comm at a time; different comms are independent. */
/* How it sits behind the transport interface (transports/transport.h): ib_transport.h,
 * ib_tr_setup.c and ib_transport.c, the transport "ib".
 *   can_connect(topo, a, b)  50 for pairs on different hosts whose views both list an HCA,
 *                            1 within a host (shm's 100 wins; WEFT_TRANSPORT=ib forces it);
 *                            each rank's port: weft__topo_pick_hca.
 *   listen / connect         per pair, both directions: listen + connect + accept +
 *                            connect_finish, the handles moved over a TCP set-up socket
 *                            whose address is in the card; none of them blocks.
 *   send / recv + test       messages cut into slices of registered staging (one engine
 *                            message each, 4 in flight): weft__ib_isend / irecv / test, a NULL
 *                            request meaning "not yet"; slice 0 (4064 bytes at most) starts
 *                            with the call's fingerprint, checked before anything lands;
 *                            receives land through the memory space (RECV_REDUCE).
 *   register / deregister    a registered window's pages (weft__ib_mr_get): its slices
 *                            after the first skip the staging copy; other user buffers are never registered. No
 *                            PEER_MEMORY (one-sided load / store is not what RDMA gives).
 *   cost row                 measured on the emulator (ib_transport.c); weft__ib_cost (from
 *                            the port's speed) is what an HCA would need, once measured.
 *   close                    weft__ib_close_*; the port (context, PD, async thread, MR cache)
 *                            is released with its last user. */
#ifndef WEFT_IB_NET_H
#define WEFT_IB_NET_H
#include <stddef.h>
#include <stdint.h>
#include "weft.h"
#include "transports/ib/ib_dev.h"

#define WEFT__IB_HANDLE_BYTES 256
#define WEFT__IB_MAX_REQUESTS 32     /* as NCCL_NET_MAX_REQUESTS */
#define WEFT__IB_CHUNK_ALIGN 128     /* split granularity across QPs */

typedef struct {
  uint8_t bytes[WEFT__IB_HANDLE_BYTES];
} weft__ib_handle;

typedef struct {
  const uint8_t *secret;   /* the job's 16-byte secret (weft_comm.secret) */
  const char *self;        /* this side, for messages: "rank 0" */
  const char *peer;        /* the other side: "rank 1" */
  int timeout_ms;          /* deadline of every wait on the comm */
} weft__ib_opts;

typedef struct weft__ib_listen_comm weft__ib_listen_comm;
typedef struct weft__ib_send_comm weft__ib_send_comm;
typedef struct weft__ib_recv_comm weft__ib_recv_comm;
typedef struct weft__ib_request weft__ib_request;

/* Receiver: a listen comm on port (index into weft__ib_ports) and its handle.
 * Errors: those of weft__ib_dev_open. */
weft_status_t weft__ib_listen(int port, const weft__ib_opts *o, weft__ib_handle *handle,
                              weft__ib_listen_comm **out);
/* Sender: QPs and FIFO toward the listener of `listen`; *handle goes to the receiver. The
 * comm is usable after weft__ib_connect_finish. Errors: WEFT_ERR_AUTH (listen fails the
 * secret), WEFT_ERR_INVALID_ARGUMENT (link layers differ: IB cannot reach RoCE),
 * WEFT_ERR_SYSTEM (verbs calls; the message names the call and errno). */
weft_status_t weft__ib_connect(int port, const weft__ib_opts *o, const weft__ib_handle *listen,
                               weft__ib_handle *handle, weft__ib_send_comm **out);
/* Receiver: accepts the sender's connect handle; *handle goes back to the sender. The recv
 * comm is usable at once. Errors as connect's. */
weft_status_t weft__ib_accept(weft__ib_listen_comm *l, const weft__ib_opts *o,
                              const weft__ib_handle *connect, weft__ib_handle *handle,
                              weft__ib_recv_comm **out);
/* Sender: completes the connection with the receiver's accept handle. Errors as connect's. */
weft_status_t weft__ib_connect_finish(weft__ib_send_comm *s, const weft__ib_handle *accept);

/* Registration (cached per port, page granular) of data[0..size) for sends and receives on
 * the comm's port. *mr is NULL for size 0. Errors: those of weft__ib_mr_get. */
weft_status_t weft__ib_reg_mr_send(weft__ib_send_comm *s, void *data, size_t size, weft__ib_mr **mr);
weft_status_t weft__ib_reg_mr_recv(weft__ib_recv_comm *r, void *data, size_t size, weft__ib_mr **mr);
void weft__ib_dereg_mr_send(weft__ib_send_comm *s, weft__ib_mr *mr);
void weft__ib_dereg_mr_recv(weft__ib_recv_comm *r, weft__ib_mr *mr);

/* Posts a send of data[0..size) (registered in mr) tagged tag. *req is NULL when the receiver
 * has not yet posted the matching receive (or all request slots are busy): call again later.
 * Errors: the comm's error; WEFT_ERR_TIMEOUT (no clear-to-send within the timeout since the
 * first try); WEFT_ERR_INVALID_ARGUMENT (size above what the receiver posted, tags differ,
 * size >= 2^31). */
weft_status_t weft__ib_isend(weft__ib_send_comm *s, const void *data, size_t size, uint32_t tag,
                             weft__ib_mr *mr, weft__ib_request **req);
/* Posts a receive of up to size bytes into data (registered in mr). *req is NULL when
 * WEFT__IB_MAX_REQUESTS receives are outstanding. Errors: the comm's error, WEFT_ERR_SYSTEM. */
weft_status_t weft__ib_irecv(weft__ib_recv_comm *r, void *data, size_t size, uint32_t tag,
                             weft__ib_mr *mr, weft__ib_request **req);
/* Progresses req's comm; *done = 1 when req finished (then *size, if not NULL, is the bytes
 * received or sent, and req is freed). Errors: a failed completion, a fatal HCA event or
 * WEFT_ERR_TIMEOUT; the request is freed then too. */
weft_status_t weft__ib_test(weft__ib_request *req, int *done, size_t *size);

/* Frees the comm and its QPs; outstanding requests are dropped. NULL is ignored. */
void weft__ib_close_send(weft__ib_send_comm *s);
void weft__ib_close_recv(weft__ib_recv_comm *r);
void weft__ib_close_listen(weft__ib_listen_comm *l);

/* ---- for the transport interface of issue 14 (capabilities and cost row) ---- */
/* The alpha-beta row of a port: alpha in us per message, beta in us per byte (from the link
 * speed; on the emulator it says nothing about real InfiniBand). */
void weft__ib_cost(int port, double *alpha_us, double *beta_us_per_byte);

/* Exposed for tests: the byte range [*off, *off + *len) QP q of nqps carries of a size-byte
 * message (128-byte-aligned chunks; trailing QPs may carry 0 bytes). */
void weft__ib_chunk(size_t size, int nqps, int q, size_t *off, size_t *len);
#endif

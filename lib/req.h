/* req.h: a request moves one message to or from one peer over that peer's connection.
 *
 * Each connection keeps two FIFO queues, sends and receives; the i-th send posted to a peer
 * matches the i-th receive that peer posts from us (ranks run operations in the same order,
 * so no tags are needed). Only the head of each queue moves; the next starts when it is
 * complete. A receive may reduce on arrival: dst[i] = acc[i] op incoming[i], which saves a
 * pass over memory compared with receiving into scratch and reducing afterwards. */
#ifndef WEFT_REQ_H
#define WEFT_REQ_H
#include <stddef.h>
#include "weft.h"
#include "mem/space.h"
#include "lib/fingerprint.h"

struct weft_comm;
struct weft__transport;
struct weft__mem_space;

enum { WEFT__REQ_SEND = 0, WEFT__REQ_RECV = 1 };

typedef struct weft__req {
  struct weft__req *next;      /* in its connection's queue */
  struct weft__conn *conn;
  /* The memory space of src, dst, acc and copy_to (mem/space.h): every byte of them is read
   * and written through it, by the core and by transports alike. */
  const struct weft__mem_space *mem;
  const void *src;             /* send: the message */
  void *dst;                   /* recv: where it lands */
  const void *acc;             /* recv: NULL to copy, else dst = acc op incoming (acc may == dst) */
  size_t bytes;                /* message size; 0 is a real (empty) message */
  size_t done;                 /* bytes moved so far, maintained by the transport */
  /* send: NULL, or where each byte sent is also copied, right after the transport read it
   * (so from cache): an all-gather's own block, fused with its first send (progress_queue) */
  void *copy_to;
  /* recv on a transport without WEFT__TRANSPORT_CAP_RECV_REDUCE: the message lands in
   * `stage` (host memory, r->bytes) and is reduced into stage_dst = stage_acc op stage when
   * complete (lib/req.c); NULL otherwise. */
  void *stage;
  void *stage_dst;
  const void *stage_acc;
  /* The call this message belongs to (lib/fingerprint.h): the sender's goes on the wire,
   * the receiver's is what it must match. NULL until posted, then the connection's current
   * call (comm->call) unless the algorithm set it first (sends and receives: their pair's
   * number). A pointer, not a copy: it keeps a request at 128 bytes, so the states of the
   * small-message algorithms still fit inside the task (lib/task.h). */
  const weft__fp_call *call;
  union {
    /* recv: NULL, or the send (initialised, its conn and call set, not yet posted) that
     * carries this message on to the next rank from dst: a ring's recvReduceSend or
     * recvCopySend (algos/ring.h, weft__ring_driver.fuse_steps). A piece landing
     * while that send has sent exactly the bytes before it, the send before it (after) has
     * completed and its connection's send queue is empty goes on at once into the send's
     * transport buffer (weft__transport.send_slot): landed in dst first, or with
     * fwd_skip_dst reduced straight into that buffer and copied from there into the send's
     * copy_to, if any (lib/req.c). Any other piece lands in dst as usual. */
    struct weft__req *fwd;
    /* send fed by a receive (fwd): the send that goes before it on its connection, or
     * NULL; none of its bytes may go before that one has completed. */
    const struct weft__req *after;
  };
  unsigned char kind;          /* WEFT__REQ_SEND or WEFT__REQ_RECV */
  unsigned char complete;      /* 1 when every byte has moved */
  /* 1: the bytes copied into dst (receive) or copy_to (send) bypass the cache
   * (non-temporal stores, weft__nt_copy) whatever the message size. Set by an algorithm
   * for the pieces of a large collective that nothing reads again soon; 0: only messages
   * of at least weft__mem_nt_threshold() bytes do. Reductions on receive are not affected. */
  unsigned char nt;
  /* recv with fwd: 1 when dst is a scratch only the send reads: a piece going on is reduced
   * straight into the send's slot (and copied from there into its copy_to), skipping dst;
   * 0: it lands in dst first and goes on from there. */
  unsigned char fwd_skip_dst;
  /* The send flags below are bits of one byte: a request stays at 128 bytes. */
  /* send: 1 when src is a copy this rank has just written (an in-place call's staging,
   * algos/all_to_all/pairwise.c), so its lines sit dirty in this core's cache; such a
   * message goes single copy only from 64 KiB (weft__req_single_copy_wanted). */
  unsigned char staged : 1;
  /* send of a group (algos/p2p/p2p.c): 1 when the group also receives from another rank,
   * into buffers apart from this message's source: an exchange, whose cores are both busy,
   * so it may go single copy as all-to-all's messages do (weft__req_single_copy_wanted).
   * 0 for a lone send, and for one whose source overlaps a receive of its group (an in-place
   * sendrecv, which a single copy would read after the receive had written there). */
  unsigned char p2p_exchange : 1;
  /* send: 1 when the sending core has copying of its own to do meanwhile (an out-of-place
   * scatter's root copies its own block): the message goes single copy where a put would
   * be wanted with a core per rank (with more ranks than cores too), but not as a put,
   * which would hand that core half the bytes besides. */
  unsigned char busy_sender : 1;
  /* recv reducing on arrival (acc set): 0, or the divisor (2 .. 65535) each piece is
   * divided by once reduced, before anything reads it (weft__mem_avg): a WEFT_AVG ring
   * all-reduce's last reduce-scatter step, whose block is then final as it lands and can
   * go on to the next rank at once (weft__req.fwd). Elementwise, so the bits are those of
   * dividing the whole block afterwards. */
  unsigned short avg_div;
  weft_datatype_t dtype;       /* element type for reduce-on-receive */
  weft_redop_t op;
} weft__req;

_Static_assert(sizeof(weft__req) <= 128, "a request stays at 128 bytes: algorithm states fit in the task");

typedef struct weft__conn {
  const struct weft__transport *tr; /* NULL for self */
  void *priv;                       /* the transport's per-peer state */
  unsigned caps;                    /* tr's capabilities the core may use (comm.h) */
  int slow;                         /* tr has post, or cannot reduce on arrival: posts take
                                       the long way (lib/req.c) */
  int peer;
  const weft__fp_call *call;        /* the communicator's current call (comm->call) */
  uint32_t p2p_sent, p2p_recvd;     /* sends and receives with this peer so far (their
                                       fingerprints' numbers) */
  uint64_t op_mark;                 /* comm->last_seq of the operation op_bytes count for */
  uint64_t op_bytes[2];             /* bytes of its completed sends, receives (the flight
                                       recorder's bytes per peer, lib/flight.h) */
  uint64_t fwd_bytes;               /* bytes received from the peer that went straight on
                                       to the next rank (weft__req.fwd), since init */
  /* 1 when the peer is bound to CPUs this rank is not (the topology's cpusets), and its
   * transport can tell whether it holds its CPU now (peer_on_cpu): with more ranks than
   * cores, waiting for it need not give this rank's CPU away (lib/task.c). */
  int other_cpus;
  weft__req *send_head, *send_tail;
  weft__req *recv_head, *recv_tail;
} weft__conn;

/* Fills a send request for bytes at src (in space mem) to conn's peer (not yet posted). */
void weft__req_init_send(weft__req *r, const struct weft__mem_space *mem, const void *src, size_t bytes);
/* Fills a receive request: copy into dst (acc NULL) or dst = acc op incoming. */
void weft__req_init_recv(weft__req *r, const struct weft__mem_space *mem, void *dst, const void *acc,
                         size_t bytes, weft_datatype_t dt, weft_redop_t op);
/* Appends r to conn's send or receive queue (no more). */
static inline void weft__req_enqueue(weft__conn *conn, weft__req *r) {
  r->conn = conn;
  r->next = NULL;
  weft__req **head = r->kind == WEFT__REQ_SEND ? &conn->send_head : &conn->recv_head;
  weft__req **tail = r->kind == WEFT__REQ_SEND ? &conn->send_tail : &conn->recv_tail;
  if (*head == NULL) *head = r;
  else (*tail)->next = r;
  *tail = r;
}
/* Whether the message of send request r (posted: r->call is set) should move by one copy,
 * the receiver reading it straight out of the sender's buffer, where a transport can
 * (transports/shm's process_vm_readv path, WEFT_SHM_CMA_BYTES); else it goes through the
 * transport's FIFO, copied in by the sender and out by the receiver. The policy, by the
 * call (lib/req.c has the figures): one copy for all-gather and all-to-all(v), where every
 * rank sends and receives at once, so it halves the work of cores that are all busy, and
 * for the sends of a group that also receives (r->p2p_exchange: sendrecv, a pipeline's
 * step), by the same rules, except that with more ranks than cores any such message from
 * 64 KiB does; a busy sender's message (r->busy_sender: an out-of-place scatter's root)
 * goes single copy exactly where weft__req_put_wanted's rules would send it as a put,
 * with more ranks than cores too; two copies for one-way traffic (broadcast, gather,
 * scatter, a lone send), where the sender's copy into the FIFO overlaps the receiver's
 * copy out (a pipeline over two cores), and for reductions (the single-copy read goes
 * through a scratch in pieces). With more ranks than
 * cores (comm->oversubscribed) all-gather and all-to-all go single copy only up to 16 MiB
 * received per rank (more lost there). Below 64 KiB (the transport's own floor,
 * WEFT_SHM_CMA_BYTES, is lower) only an out-of-place all-gather or all-to-all(v) message on a
 * communicator with a core per rank does: not with more ranks than cores, not a staged
 * send (r->staged), not a broadcast. A broadcast message of at most 1 MiB goes single copy
 * when the cores are far apart: peer_rt_ns, the transport's last measured cache-line round
 * trip to the receiver (transports/shm/shm_placement.h; 0: not measured), of 100 ns or more
 * (the FIFO's lines then cross that distance as dirty lines). Where the transport measured
 * both paths to the receiver (copy_verdict, a WEFT__SINGLE_COPY_* mask, 0: not measured;
 * transports/shm/shm_copy_probe.h), the measurement overrides the guesses: all-gather and
 * all-to-all(v) stay on two copies unless WEFT__SINGLE_COPY_TWO_WAY (with more ranks than
 * cores too), and a broadcast goes
 * single copy (in the bounds above) when WEFT__SINGLE_COPY_ONE_WAY, from 64 KiB when
 * WEFT__SINGLE_COPY_AGAIN_ONE_WAY, or from 256 KiB when WEFT__SINGLE_COPY_TWO_WAY (a whole
 * FIFO piece's message: its copies do not overlap), whatever peer_rt_ns.
 * Messages below 64 KiB follow the small class's measurement instead when there is one
 * (WEFT__SINGLE_COPY_SMALL_MEASURED: two copies unless WEFT__SINGLE_COPY_SMALL_TWO_WAY).
 * WEFT_SHM_CMA_CALLS=all overrides it in the shm transport. Thread safety: reads comm's
 * settings, r and its call only. */
enum {
  WEFT__SINGLE_COPY_MEASURED = 1, /* the transport measured both paths to this peer ... */
  WEFT__SINGLE_COPY_TWO_WAY = 2,  /* ... and one copy was faster than copy-in plus copy-out */
  WEFT__SINGLE_COPY_ONE_WAY = 4,  /* ... and faster than the slower of the two (a pipeline) */
  /* ... and, with TWO_WAY, a message sent again faster than the slower of the two by
   * WEFT__SHM_COPY_PROBE_AGAIN_MARGIN_PCT (broadcasts of 64-256 KiB: lib/req.c) */
  WEFT__SINGLE_COPY_AGAIN_ONE_WAY = 32,
  /* The same for messages below 64 KiB, measured on a small message of their own: a
   * system call and page pinning weigh there what bandwidth weighs at 256 KiB. */
  WEFT__SINGLE_COPY_SMALL_MEASURED = 8,
  WEFT__SINGLE_COPY_SMALL_TWO_WAY = 16,
};
int weft__req_single_copy_wanted(const struct weft_comm *comm, const weft__req *r, unsigned peer_rt_ns,
                                 unsigned copy_verdict);
/* Whether send r, where the transport can move it by single copy, should go as a put: the
 * receiver reads the first half of the message out of our buffer while we write the second
 * half into its buffer, so both cores copy (transports/shm/shm_fifo.h). 1 for broadcast
 * messages of calls of at least 64 KiB, and gather and scatter messages of at least 64 KiB,
 * with a core per rank, where copy_verdict (as for weft__req_single_copy_wanted) measured
 * one copy faster than copy-in plus copy-out; else 0, and 0 for a busy sender's
 * (r->busy_sender: an out-of-place scatter's root), which weft__req_single_copy_wanted
 * then takes as a plain single copy where it would have gone as a put. The transport adds
 * its own bounds (the peer's memory writable, the message two pages or more). The figures are in
 * lib/req.c. Pure; thread safety: comm's progress thread. */
int weft__req_put_wanted(const struct weft_comm *comm, const weft__req *r, unsigned copy_verdict);
/* The smallest message weft__req_put_wanted wants as a put, and a busy sender's as a read. */
enum { WEFT__PUT_MIN_BYTES = 64 << 10 };
/* Counts r, a completed request of conn c's, in c's bytes of the current operation
 * (op_bytes, the flight recorder's). The progress pass calls it as it takes a request off
 * its queue; a send that its receive fed whole before it was posted (weft__req.fwd) is
 * never queued, and its poster calls it instead. Thread safety: comm's progress thread. */
void weft__req_retire(struct weft_comm *comm, weft__conn *c, const weft__req *r);
/* weft__req_post's long way (lib/req.c): a space whose operations may still run (a send's
 * bytes are completed first, weft__mem_wait), a reducing receive on a transport that cannot
 * reduce on arrival (staged), a transport that wants to know at once (its post). */
void weft__req_post_slow(weft__conn *conn, weft__req *r);
/* Appends r to conn's send or receive queue, and tells the transport when it asks to know.
 * Host memory on a transport without post that reduces on arrival (conn->slow 0, set at
 * connect) takes one test and the queue: the latency path. */
static inline void weft__req_post(weft__conn *conn, weft__req *r) {
  if (r->call == NULL) r->call = conn->call;
  if (conn->slow || r->mem != &weft__mem_host) weft__req_post_slow(conn, r);
  else weft__req_enqueue(conn, r);
}

/* For transports: hands nbytes of incoming message data (host memory: a FIFO slot, a
 * staging buffer) to r, the message's bytes [at, at + nbytes): copies or reduces them into
 * r->dst at offset `at` through r's space, and waits for the space where its contract asks
 * (mem/space.h), so the bytes are in place when this returns. When reducing, at and nbytes
 * must be multiples of the element size (transports cut messages on element boundaries).
 * Does not touch r->done. */
void weft__req_land(weft__req *r, size_t at, const void *data, size_t nbytes);
/* weft__req_land at r->done, then advances r->done by nbytes; for a receive with fwd the
 * piece may instead go on to the next rank as it lands (weft__req.fwd). For transports
 * handing over their data in message order (shm's FIFO slots). comm: r's communicator. */
void weft__req_deliver(struct weft_comm *comm, weft__req *r, const void *data, size_t nbytes);

/* Moves every connection of comm that has queued requests as far as it can without
 * blocking. *progressed is set to 1 when any byte moved or any request completed.
 * Returns the first transport error (the message names the peer). Caller holds comm->lock. */
weft_status_t weft__comm_progress(struct weft_comm *comm, int *progressed);

/* Drops every queued request of comm (after an error or abort), freeing their stages. */
void weft__comm_drop_requests(struct weft_comm *comm);
#endif

/* ib_transport.h: the ib transport's state (transports/transport.h's interface over the
 * engine of ib_net.h), shared by its setup (ib_tr_setup.c) and its data path
 * (ib_transport.c). Internal to transports/ib/.
 *
 * A message of B bytes moves as slices: slice 0 holds its first IBT_FIRST_BYTES (4064) at
 * most, the others at most the slice size (WEFT_IB_SLICE_BYTES, default 512 KiB, a
 * multiple of 4096); each slice is one engine message, from the sender's registered staging
 * slot to the receiver's registered staging slot, SLOTS of them in flight per direction (a
 * pipeline: the receiver lands slice k while slices k+1.. travel). Both ends cut a message
 * alike (the card carries the slice size; a mismatch fails setup). A 0-byte message is one
 * empty slice 0 (the engine's immediates still consume a receive).
 *
 * The call check (lib/fingerprint.h): slice 0 of every message, 0-byte ones included, is
 * an ibt_hdr (32 bytes: the sending call's fingerprint and the message size) followed by
 * the slice's bytes, written just in front of them in the staging slot, so a message of up
 * to 4064 bytes (the latency path) is still one RDMA write, 32 bytes longer, and a longer
 * one has one more engine message, of 4 KiB. The receiver posts slice 0 with room for the
 * whole of it whatever size it expects (so a sender of another size is not refused by the
 * engine before its header is read), and compares the header with its own call before it
 * lands any byte: another call is weft__fp_mismatch naming both ranks and both calls,
 * another size a size mismatch. Slice 0 carries the engine tag IBT_TAG_FIRST; slices 1..
 * carry B mod 2^32, so a sender of another size also fails at its second slice instead of
 * having its bytes misread.
 *
 * Registered windows (reg / dereg: weft_comm_window_register) skip the staging: a slice
 * after the first whose bytes lie inside one (its memory space's host view) is sent
 * straight from, or, for a receive that copies, written straight into, the user's buffer
 * with the window's registration. Slice 0 always goes through staging (its header must sit
 * in front of its bytes, and they must not land before the header was checked: a copy of 4
 * KiB at most per message), and a receive posts its direct slices only once slice 0 was
 * checked (one clear-to-send later than before). */
#ifndef WEFT_IB_TRANSPORT_H
#define WEFT_IB_TRANSPORT_H
#include <stddef.h>
#include <stdint.h>
#include "lib/comm.h"
#include "lib/req.h"
#include "lib/sockutil.h"
#include "transports/ib/ib_net.h"
#include "transports/transport.h"

enum { IBT_SLOTS = 4 };
#define IBT_SLICE_DEFAULT ((size_t)512 * 1024)
#define IBT_MSG_MAGIC 0x5447494254464557ull /* "WEFTBIGT" little-endian */
#define IBT_HDR_MAGIC 0x50464249u          /* "IBFP" little-endian: an ibt_hdr */
#define IBT_TAG_FIRST 0xffffffffu          /* the engine tag of every message's slice 0 */
#define IBT_FIRST_BYTES ((size_t)4096 - 32) /* message bytes in slice 0, behind its header */

/* What slice 0 of every message starts with (host byte order, as the engine's handles). */
typedef struct {
  weft__fp fp;       /* the sending call's fingerprint (r->call->fp) */
  uint64_t bytes;    /* the message's size in bytes */
  uint32_t magic;    /* IBT_HDR_MAGIC: anything else means the two ends are out of step */
  uint32_t pad;
} ibt_hdr;
_Static_assert(sizeof(ibt_hdr) == 32, "32 bytes on the wire");

/* A staging slot: IBT_SLOT_ROOM bytes of room, the header at its end, then the slice's
 * bytes (cache-line aligned), so slice 0 goes out as one contiguous write. */
#define IBT_SLOT_ROOM ((size_t)64)

/* The card: what each rank tells the others at listen. */
typedef struct {
  int32_t ok;        /* 0: this rank could not listen (its peers fail at once, naming it) */
  int32_t pad;
  uint64_t slice;    /* WEFT_IB_SLICE_BYTES: both ends must cut messages alike */
  weft__sockaddr addr; /* the set-up socket that moves the engine's handles */
} ibt_card;

/* One handle on the set-up socket: the engine's listen, connect or accept handle. */
enum { IBT_LISTEN = 1, IBT_CONNECT = 2, IBT_ACCEPT = 3 };
typedef struct {
  uint64_t magic;
  int32_t rank, kind;
  weft__ib_handle h;
} ibt_msg;

/* One direction's message in flight: slices [next_done, next_post) are posted. */
typedef struct {
  weft__req *req;    /* NULL between messages */
  size_t done;       /* req->done as this transfer left it */
  size_t nslices, next_post, next_done;
  int staged[IBT_SLOTS];            /* send: the slot already holds slice next_post's bytes */
  int direct[IBT_SLOTS];            /* recv: the slot's slice lands in a window, not staging */
  int checked;                      /* recv: slice 0's header matched this rank's call */
  weft__ib_request *rq[IBT_SLOTS];  /* the engine's request of the slot's slice */
} ibt_xfer;

typedef struct {
  int peer;
  int fd;            /* set-up socket; -1 once closed or before it exists */
  int finished;            /* the send comm got the peer's accept handle */
  weft__ib_send_comm *sc;  /* to the peer */
  weft__ib_recv_comm *rc;  /* from the peer */
  weft__ib_opts opts;
  char self[24], name[24];
  char *sstage, *rstage;   /* IBT_SLOTS slots of IBT_SLOT_ROOM + slice bytes each, page-aligned */
  weft__ib_mr *smr, *rmr;
  weft_status_t dead;      /* an earlier error: every later call fails */
  ibt_xfer send, recv;
} ibt_peer;

/* A registered window (the transport's reg handle): the pages of its host view, registered
 * on this rank's port; holds a reference on the port so it outlives the communicator's
 * connections if it must. */
typedef struct ibt_win {
  char *view;
  size_t bytes;
  weft__ib_dev *dev;
  weft__ib_mr *mr;
  struct ibt_win *next;
} ibt_win;

typedef struct {
  int nranks, port, listen_fd;
  ibt_win *wins;           /* registered windows (reg), newest first */
  uint64_t window_sends, window_recvs; /* slices that skipped staging (for tests) */
  size_t slice;
  weft__ib_listen_comm *lc;
  weft__ib_handle lh;      /* our listen handle, sent to every peer */
  ibt_peer **by_rank;      /* [nranks]; NULL for ranks not reached over ib */
  int checked;             /* the peers' cards were checked */
  int *pending;            /* accepted set-up sockets whose first message has not come */
  int npending, maxpending;
} ibt_state;

extern const weft__transport weft__transport_ib;

static inline ibt_state *weft__ibt_state_of(struct weft_comm *comm) {
  return comm->transport_state[weft__transport_index(&weft__transport_ib)];
}

/* Setup (ib_tr_setup.c): the transport's can_connect, listen, connect and close, with the
 * contracts of transports/transport.h (card: an ibt_card; errors name this rank, the peer
 * and the step: WEFT_ERR_REMOTE for a peer that could not listen or closed its set-up
 * socket, WEFT_ERR_INVALID_USAGE for differing WEFT_IB_SLICE_BYTES, the engine's status for
 * its handles and QPs). Called by the core with the communicator's lock held; the state is
 * the communicator's alone. */
int weft__ibt_can_connect(const struct weft__topo_system *topo, int a, int b);
weft_status_t weft__ibt_listen(struct weft_comm *comm, const int *peers, int npeers, void *card);
weft_status_t weft__ibt_connect(struct weft_comm *comm, const void *const *cards, char *waiting, size_t len);
void weft__ibt_close(struct weft_comm *comm);
/* reg / dereg (transports/transport.h): registers the host view of buf[0, bytes) (space's)
 * on this rank's port; *handle is NULL (nothing registered, not an error) without ib peers,
 * a host view or bytes. Errors: those of weft__ib_dev_open and weft__ib_mr_get, naming this
 * rank. Called by the core under the communicator's lock. */
weft_status_t weft__ibt_reg(struct weft_comm *comm, const struct weft__mem_space *space, void *buf, size_t bytes,
                            void **handle);
void weft__ibt_dereg(struct weft_comm *comm, void *handle);
/* The registration of the window holding [p, p + len) (host-view addresses), or NULL. */
weft__ib_mr *weft__ibt_window_mr(const ibt_state *st, const char *p, size_t len);

/* Re-raises the engine's last error (the calling thread's, so call it on the thread that
 * made the failing engine call) for comm, with this rank, the peer and the operation
 * ("send to", "receive from", "setup: connect to") in front: "rank 0: ib send to peer 1: <engine message: status
 * string, QP, sequence>". Marks the peer dead. Returns st. */
weft_status_t weft__ibt_fail(struct weft_comm *comm, ibt_peer *pp, const char *op, weft_status_t st);
#endif

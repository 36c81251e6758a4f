/* socket_state.h: the socket transport's state, shared by its setup (socket_setup.c) and
 * its data path (socket.c). */
#ifndef WEFT_SOCKET_STATE_H
#define WEFT_SOCKET_STATE_H
#include <stddef.h>
#include <stdint.h>
#include "lib/comm.h"
#include "lib/req.h"
#include "lib/sockutil.h"
#include "transports/transport.h"

enum { MAX_SOCKS = 16, STAGE_BYTES = 256 * 1024 };
#define HELLO_MAGIC 0x4b434f5354464557ull /* "WEFTSOCK" little-endian */
#define ACK_MAGIC 0x4b43414b54464557ull   /* "WEFTKACK" */

/* The card: what each rank tells the others at listen. */
typedef struct {
  int32_t ok;        /* 0 when this rank could not listen (then every peer fails clearly) */
  int32_t nsocks;
  uint64_t split;    /* WEFT_SOCKET_SPLIT_BYTES: both sides must cut messages alike */
  weft__sockaddr addr;
  uint8_t nonce[16]; /* random: a hello or ack to this rank must MAC it with the secret */
} sock_card;

/* The secret itself never crosses the wire: each message carries weft__mac (lib/siphash.h)
 * of itself (mac 0) and the receiver's nonce. */
typedef struct {
  uint64_t magic;
  int32_t rank, index, nsocks, to;
  uint64_t mac;
} sock_hello;

typedef struct {
  uint64_t magic;
  int32_t rank, status;
  int32_t index, to;
  uint64_t mac;
} sock_ack;

typedef struct {
  uint64_t total, part; /* message bytes, this part's bytes */
  weft__fp fp;          /* the sender's call (lib/fingerprint.h), checked by the receiver */
} wire_hdr;
#define WIRE_HDR ((size_t)sizeof(wire_hdr))

/* One part of the message in flight in one direction. */
typedef struct {
  size_t off, len;      /* the part's slice of the message */
  size_t moved;         /* payload bytes sent, or received (into dst or staging) */
  size_t delivered;     /* receive with reduce: payload bytes reduced into dst */
  size_t hdr_moved;
  wire_hdr hdr;
  int done;
} sock_part;

typedef struct {
  weft__req *req;       /* the request the parts belong to; NULL between messages */
  size_t done;          /* req->done as this transfer left it */
  int nparts, left;
  sock_part part[MAX_SOCKS];
} sock_xfer;

typedef struct {
  int peer, nsocks;
  size_t split;
  int fd[MAX_SOCKS];
  weft_status_t dead;   /* an earlier error broke the byte stream: every later call fails */
  sock_xfer send, recv;
  uint8_t *stage[MAX_SOCKS];
  size_t fill[MAX_SOCKS]; /* staged bytes not yet reduced (less than one element) */
  int acked[MAX_SOCKS];   /* setup: our socket idx to a higher peer got its ack */
} sock_peer;

typedef struct {
  int nranks, listen_fd, nsocks;
  size_t split;
  size_t buffer_bytes;  /* WEFT_SOCKET_BUFFER_BYTES; 0: the kernel's autotuning */
  int buffer_auto;      /* WEFT_SOCKET_BUFFER_BYTES unset: weft__socket_rcvbuf decides */
  sock_peer **by_rank;  /* [nranks]; NULL for ranks not reached over sockets */
  /* Setup (socket_setup.c) */
  int checked;          /* the peers' cards were checked */
  int incoming, filed;  /* sockets lower peers open to us, and those filed so far */
  int *pending;         /* [incoming + PENDING_EXTRA] accepted sockets whose hello has not come,
                           oldest first */
  int npending;
  uint8_t nonce[16];    /* ours, in our card */
  uint8_t (*peer_nonce)[16]; /* [nranks] each socket peer's, from its card */
} sock_state;

enum { PENDING_EXTRA = 16 }; /* room for stray connections among the pending */

extern const weft__transport weft__transport_socket;

static inline sock_state *weft__socket_state_of(struct weft_comm *comm) {
  return comm->transport_state[weft__transport_index(&weft__transport_socket)];
}

/* The receive buffer a data socket to a peer on this host gets when
 * WEFT_SOCKET_BUFFER_BYTES is unset (SO_RCVBUF's argument; Linux doubles it).
 *
 * Why: on one host both copies of a byte run on this machine's cores, the sender's into
 * the socket and the receiver's out of it, and the socket's receive queue is where the
 * byte waits between them. The kernel's autotuning lets that queue grow to tcp_rmem's
 * maximum (32 MiB on the VMs weft is developed on), so a sender runs megabytes ahead and
 * the receiver copies bytes that have left the cache. A fixed 1 MiB (2 MiB granted)
 * keeps the sender close behind. AMD EPYC Zen 3 VM, 2 ranks, WEFT_TRANSPORT=socket,
 * all-reduce 16-256 MiB against autotuning, interleaved launches: 1.03-1.50x faster at
 * every size (medians over 3 runs of 5-8 rounds); setting only the send buffer instead
 * gained less than half of that, and 256 KiB (512 KiB granted) was slower than
 * autotuning, so the size is not applied where net.core.rmem_max would cut it below
 * what was asked. Between hosts the buffer must cover the link's bandwidth-delay
 * product, which autotuning follows, so peers on other hosts keep it. */
#define WEFT__SOCKET_SAME_HOST_RCVBUF (1u << 20)

/* What SO_RCVBUF to ask for on the data sockets to peer, in bytes: the
 * WEFT_SOCKET_BUFFER_BYTES set (0: autotuning), else WEFT__SOCKET_SAME_HOST_RCVBUF when
 * peer shares this rank's host (equal host_hash) and rmem_max (net.core.rmem_max, bytes;
 * 0 when unknown) admits it, else 0: leave the kernel's autotuning. Pure; thread-safe. */
size_t weft__socket_rcvbuf(const struct weft_comm *comm, const sock_state *st, int peer, size_t rmem_max);
/* net.core.rmem_max in bytes (/proc/sys/net/core/rmem_max), 0 when it cannot be read.
 * Thread-safe. */
size_t weft__socket_rmem_max(void);

/* Setup (socket_setup.c): the transport's can_connect, listen, connect and close. */
int weft__socket_can_connect(const struct weft__topo_system *topo, int a, int b);
weft_status_t weft__socket_listen(struct weft_comm *comm, const int *peers, int npeers, void *card);
weft_status_t weft__socket_connect(struct weft_comm *comm, const void *const *cards, char *waiting, size_t len);
void weft__socket_close(struct weft_comm *comm);
#endif

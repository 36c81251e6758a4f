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


/* What SO_RCVBUF to ask for on the data sockets to peer, in bytes: the
 * WEFT_SOCKET_BUFFER_BYTES set (0: autotuning), else, when peer shares this rank's host
 * (equal host_hash), weft__sock_same_host_rcvbuf(rmem_max) (lib/sockutil.h: 1 MiB where
 * net.core.rmem_max admits it), else 0: leave the kernel's autotuning. Pure; thread-safe. */
size_t weft__socket_rcvbuf(const struct weft_comm *comm, const sock_state *st, int peer, size_t rmem_max);

/* Setup (socket_setup.c): the transport's can_connect, listen, connect and close. */
int weft__socket_can_connect(const struct weft__topo_system *topo, int a, int b);
weft_status_t weft__socket_listen(struct weft_comm *comm, const int *peers, int npeers, void *card);
weft_status_t weft__socket_connect(struct weft_comm *comm, const void *const *cards, char *waiting, size_t len);
void weft__socket_close(struct weft_comm *comm);
#endif

/* sockutil.h: TCP helpers shared by the bootstrap and the socket transport: choosing the
 * interface, printing and parsing addresses, blocking I/O bounded by a deadline, and the
 * receive buffer of connections within one host (perf/tcp_floor uses it too). */
#ifndef WEFT_SOCKUTIL_H
#define WEFT_SOCKUTIL_H
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include "weft.h"

typedef struct {
  struct sockaddr_storage ss;
  socklen_t len;
} weft__sockaddr;

/* The local address to listen on: WEFT_SOCKET_IFNAME's (a name or a prefix such as "eth"),
 * else the first non-loopback interface that is up, else loopback; WEFT_SOCKET_FAMILY
 * (AF_INET / AF_INET6) restricts the family. Port 0. ifname (may be NULL) receives the
 * interface name. Errors: WEFT_ERR_SYSTEM (no interface matches; message says why). */
weft_status_t weft__sockaddr_pick_local(weft__sockaddr *out, char *ifname, size_t ifname_len);
/* "192.0.2.2:4242" or "[fd00::2]:4242" into buf; returns buf. */
const char *weft__sockaddr_str(const weft__sockaddr *a, char *buf, size_t len);
/* Parses "host:port", "[v6addr]:port" or host and port apart (port may be NULL then host
 * must hold it). Resolves names with getaddrinfo. Errors: WEFT_ERR_INVALID_ARGUMENT. */
weft_status_t weft__sockaddr_parse(const char *host, const char *port, weft__sockaddr *out);
uint16_t weft__sockaddr_port(const weft__sockaddr *a);
void weft__sockaddr_set_port(weft__sockaddr *a, uint16_t port);

/* The receive buffer of a TCP connection whose two ends are on this host: SO_RCVBUF's
 * argument in bytes (Linux grants twice it), what the socket transport asks for when
 * WEFT_SOCKET_BUFFER_BYTES is unset and perf/tcp_floor by default.
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
#define WEFT__SOCK_SAME_HOST_RCVBUF (1u << 20)
/* net.core.rmem_max in bytes (/proc/sys/net/core/rmem_max), 0 when it cannot be read.
 * Thread-safe. */
size_t weft__sock_rmem_max(void);
/* WEFT__SOCK_SAME_HOST_RCVBUF when rmem_max (bytes; 0: unknown) admits it, else 0: leave
 * the kernel's autotuning (a buffer cut to a smaller rmem_max measured slower than it).
 * Pure; thread-safe. */
size_t weft__sock_same_host_rcvbuf(size_t rmem_max);

/* Binds and listens on *addr (port 0 picks one; *addr is updated to the bound address).
 * Close-on-exec. Returns the fd, or -1 with errno set. */
int weft__sock_listen(weft__sockaddr *addr, int backlog);
/* Connects, retrying refused connections (the peer may not listen yet) until deadline_ns.
 * Returns the fd (blocking mode, TCP_NODELAY, close-on-exec), or -1 with errno set
 * (ETIMEDOUT at the deadline). */
int weft__sock_connect(const weft__sockaddr *addr, uint64_t deadline_ns);
/* Accepts one connection by deadline_ns: the fd, or -1 with errno (ETIMEDOUT). */
int weft__sock_accept(int listen_fd, uint64_t deadline_ns);
/* Sends / receives exactly len bytes by deadline_ns. 0 on success; -1 with errno set:
 * ETIMEDOUT at the deadline, ECONNRESET when the peer closed (EOF). */
int weft__sock_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns);
int weft__sock_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns);
int weft__sock_set_nonblock(int fd, int on);
int weft__sock_set_nodelay(int fd);
/* The address family WEFT_SOCKET_FAMILY asks for: AF_INET ("AF_INET" or "4"), AF_INET6
 * ("AF_INET6" or "6"), else AF_UNSPEC (either). Reads the environment; thread-safe. */
int weft__sock_family_wanted(void);
#endif

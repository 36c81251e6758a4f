/* sockutil.h: TCP helpers shared by the bootstrap and the socket transport: choosing the
 * interface, printing and parsing addresses, and blocking I/O bounded by a deadline. */
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

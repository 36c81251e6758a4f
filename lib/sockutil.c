/* sockutil.c: TCP plumbing shared by the bootstrap and the socket transport. Everything that
 * waits takes an absolute deadline so no caller can hang. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lib/clock.h"
#include "lib/env.h"
#include "lib/sockutil.h"
#include "lib/status.h"

int weft__sock_family_wanted(void) {
  const char *f = weft__env_str("WEFT_SOCKET_FAMILY", NULL);
  if (f == NULL) return AF_UNSPEC;
  if (strcmp(f, "AF_INET") == 0 || strcmp(f, "4") == 0) return AF_INET;
  if (strcmp(f, "AF_INET6") == 0 || strcmp(f, "6") == 0) return AF_INET6;
  return AF_UNSPEC;
}

/* Usable: up, has an IPv4 or a non-link-local IPv6 address (link-local needs a scope id
 * that other hosts cannot use). */
static int usable(const struct ifaddrs *ifa, int family) {
  if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP)) return 0;
  int f = ifa->ifa_addr->sa_family;
  if (f != AF_INET && f != AF_INET6) return 0;
  if (family != AF_UNSPEC && f != family) return 0;
  if (f == AF_INET6) {
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ifa->ifa_addr;
    if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) return 0;
  }
  return 1;
}

static int matches(const struct ifaddrs *ifa, const char *want, int loopback_ok) {
  if (want != NULL) return strncmp(ifa->ifa_name, want, strlen(want)) == 0;
  return loopback_ok ? (ifa->ifa_flags & IFF_LOOPBACK) != 0 : !(ifa->ifa_flags & IFF_LOOPBACK);
}

/* Picks IPv4 before IPv6 on the same interface, as users expect "eth0" to mean its v4. */
static const struct ifaddrs *find(struct ifaddrs *all, const char *want, int loopback_ok,
                                  int family) {
  const struct ifaddrs *v6 = NULL;
  for (struct ifaddrs *ifa = all; ifa != NULL; ifa = ifa->ifa_next) {
    if (!usable(ifa, family) || !matches(ifa, want, loopback_ok)) continue;
    if (ifa->ifa_addr->sa_family == AF_INET) return ifa;
    if (v6 == NULL) v6 = ifa;
  }
  return v6;
}

weft_status_t weft__sockaddr_pick_local(weft__sockaddr *out, char *ifname, size_t ifname_len) {
  struct ifaddrs *all;
  if (getifaddrs(&all) != 0)
    return weft__error(NULL, WEFT_ERR_SYSTEM, "getifaddrs failed: %s", strerror(errno));
  const char *want = weft__env_str("WEFT_SOCKET_IFNAME", NULL);
  int family = weft__sock_family_wanted();
  const struct ifaddrs *ifa = find(all, want, 0, family);
  if (ifa == NULL && want == NULL) ifa = find(all, NULL, 1, family);
  if (ifa == NULL) {
    freeifaddrs(all);
    return weft__error(NULL, WEFT_ERR_SYSTEM,
                       "no usable network interface (WEFT_SOCKET_IFNAME=%s, WEFT_SOCKET_FAMILY=%s)",
                       want ? want : "unset", weft__env_str("WEFT_SOCKET_FAMILY", "unset"));
  }
  memset(out, 0, sizeof(*out));
  out->len = ifa->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                 : sizeof(struct sockaddr_in6);
  memcpy(&out->ss, ifa->ifa_addr, out->len);
  weft__sockaddr_set_port(out, 0);
  if (ifname != NULL) snprintf(ifname, ifname_len, "%s", ifa->ifa_name);
  freeifaddrs(all);
  return WEFT_SUCCESS;
}

const char *weft__sockaddr_str(const weft__sockaddr *a, char *buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (a->ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &((const struct sockaddr_in *)&a->ss)->sin_addr, host, sizeof(host));
    snprintf(buf, len, "%s:%u", host, weft__sockaddr_port(a));
  } else {
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)&a->ss)->sin6_addr, host, sizeof(host));
    snprintf(buf, len, "[%s]:%u", host, weft__sockaddr_port(a));
  }
  return buf;
}

uint16_t weft__sockaddr_port(const weft__sockaddr *a) {
  if (a->ss.ss_family == AF_INET) return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
  return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
}

void weft__sockaddr_set_port(weft__sockaddr *a, uint16_t port) {
  if (a->ss.ss_family == AF_INET)
    ((struct sockaddr_in *)&a->ss)->sin_port = htons(port);
  else
    ((struct sockaddr_in6 *)&a->ss)->sin6_port = htons(port);
}

/* Splits "host:port" or "[v6]:port" in place into host and port. */
static int split_host_port(char *s, char **host, char **port) {
  if (s[0] == '[') {
    char *close = strchr(s, ']');
    if (close == NULL || close[1] != ':') return -1;
    *close = '\0';
    *host = s + 1;
    *port = close + 2;
    return 0;
  }
  char *colon = strrchr(s, ':');
  if (colon == NULL) return -1;
  *colon = '\0';
  *host = s;
  *port = colon + 1;
  return 0;
}

weft_status_t weft__sockaddr_parse(const char *host, const char *port, weft__sockaddr *out) {
  char buf[512];
  char *h = (char *)host, *p = (char *)port;
  if (host == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "address is NULL");
  if (port == NULL) {
    snprintf(buf, sizeof(buf), "%s", host);
    if (split_host_port(buf, &h, &p) != 0)
      return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT,
                         "address '%s' is not host:port or [v6addr]:port", host);
  }
  /* getaddrinfo takes "70000" and wraps it to 4464: refuse numeric ports out of range. */
  uint16_t port_num;
  if (p != NULL && p[0] >= '0' && p[0] <= '9' && strcmp(p, "0") != 0 && weft__parse_port(p, &port_num) != 0)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "address '%s' port '%s': a port is a number "
                       "from 1 to 65535", h, p);
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = weft__sock_family_wanted();
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(h, p, &hints, &res);
  if (rc != 0 || res == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "cannot resolve '%s' port '%s': %s", h, p,
                       gai_strerror(rc));
  memset(out, 0, sizeof(*out));
  memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
  out->len = res->ai_addrlen;
  freeaddrinfo(res);
  return WEFT_SUCCESS;
}

int weft__sock_listen(weft__sockaddr *addr, int backlog) {
  int fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, (struct sockaddr *)&addr->ss, addr->len) != 0 || listen(fd, backlog) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  socklen_t len = sizeof(addr->ss);
  getsockname(fd, (struct sockaddr *)&addr->ss, &len);
  addr->len = len;
  return fd;
}

int weft__sock_set_nonblock(int fd, int on) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return -1;
  return fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

int weft__sock_set_nodelay(int fd) {
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Waits for events on fd until the deadline: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, uint64_t deadline_ns) {
  for (;;) {
    struct pollfd p = {.fd = fd, .events = events};
    int ms = weft__ms_left(deadline_ns);
    int rc = poll(&p, 1, ms);
    if (rc > 0) return 1;
    if (rc == 0) {
      if (weft__now_ns() >= deadline_ns) return 0;
      continue;
    }
    if (errno != EINTR) return -1;
  }
}

/* One non-blocking connect attempt bounded by the deadline: 0 connected, -1 errno. */
static int connect_once(int fd, const weft__sockaddr *addr, uint64_t deadline_ns) {
  if (connect(fd, (const struct sockaddr *)&addr->ss, addr->len) == 0) return 0;
  if (errno != EINPROGRESS) return -1;
  int ready = wait_fd(fd, POLLOUT, deadline_ns);
  if (ready <= 0) {
    if (ready == 0) errno = ETIMEDOUT;
    return -1;
  }
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    errno = err;
    return -1;
  }
  return 0;
}

int weft__sock_connect(const weft__sockaddr *addr, uint64_t deadline_ns) {
  useconds_t backoff_us = 1000;
  for (;;) {
    int fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    if (connect_once(fd, addr, deadline_ns) == 0) {
      weft__sock_set_nonblock(fd, 0);
      weft__sock_set_nodelay(fd);
      return fd;
    }
    int e = errno;
    close(fd);
    /* Refused: the listener is not up yet (a rank may start before the root). Retry. */
    int retry = (e == ECONNREFUSED || e == ECONNRESET || e == EAGAIN || e == ENETUNREACH);
    if (!retry || weft__now_ns() + backoff_us * 1000ull >= deadline_ns) {
      errno = retry ? ETIMEDOUT : e;
      return -1;
    }
    usleep(backoff_us);
    if (backoff_us < 100000) backoff_us *= 2;
  }
}

int weft__sock_accept(int listen_fd, uint64_t deadline_ns) {
  for (;;) {
    int ready = wait_fd(listen_fd, POLLIN, deadline_ns);
    if (ready <= 0) {
      if (ready == 0) errno = ETIMEDOUT;
      return -1;
    }
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
      weft__sock_set_nodelay(fd);
      return fd;
    }
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) return -1;
  }
}

int weft__sock_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    int ready = wait_fd(fd, POLLOUT, deadline_ns);
    if (ready <= 0) {
      if (ready == 0) errno = ETIMEDOUT;
      return -1;
    }
  }
  return 0;
}

int weft__sock_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0) {
      errno = ECONNRESET;
      return -1;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    int ready = wait_fd(fd, POLLIN, deadline_ns);
    if (ready <= 0) {
      if (ready == 0) errno = ETIMEDOUT;
      return -1;
    }
  }
  return 0;
}

size_t weft__sock_rmem_max(void) {
  FILE *f = fopen("/proc/sys/net/core/rmem_max", "r");
  unsigned long long v = 0;
  if (f == NULL) return 0;
  if (fscanf(f, "%llu", &v) != 1) v = 0;
  fclose(f);
  return (size_t)v;
}

size_t weft__sock_same_host_rcvbuf(size_t rmem_max) {
  return rmem_max >= WEFT__SOCK_SAME_HOST_RCVBUF ? WEFT__SOCK_SAME_HOST_RCVBUF : 0;
}

/* shm_segment.c: memfd segments and their hand-over to peers through abstract Unix sockets
 * with SCM_RIGHTS (see shm_segment.h). memfd + fd passing instead of shm_open means no name
 * in /dev/shm can outlive a crashed job; abstract sockets likewise vanish with their last
 * fd. SOCK_SEQPACKET keeps each setup message whole, with its fd attached. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include "lib/clock.h"
#include "lib/siphash.h"
#include "transports/shm/shm_segment.h"

#ifndef F_SEAL_SEAL
#include <linux/fcntl.h>
#endif

int weft__shm_segment_create(weft__shm_segment *seg, const char *name, size_t bytes) {
  seg->base = NULL;
  seg->bytes = bytes;
  seg->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (seg->fd < 0) return -1;
  if (ftruncate(seg->fd, (off_t)bytes) != 0) goto fail;
  /* A peer must never be able to shrink the segment under our feet (SIGBUS). */
  (void)fcntl(seg->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
  if (p == MAP_FAILED) goto fail;
  seg->base = p;
  return 0;
fail:;
  int e = errno;
  close(seg->fd);
  seg->fd = -1;
  errno = e;
  return -1;
}

int weft__shm_segment_map_fd(weft__shm_segment *seg, int fd, size_t bytes) {
  struct stat st;
  seg->base = NULL;
  seg->bytes = bytes;
  seg->fd = -1;
  int rc = -1;
  if (fstat(fd, &st) != 0) goto out;
  if ((size_t)st.st_size < bytes) {
    errno = EPROTO;
    goto out;
  }
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) goto out;
  seg->base = p;
  rc = 0;
out:;
  int e = errno;
  close(fd);
  errno = e;
  return rc;
}

void weft__shm_segment_close_fd(weft__shm_segment *seg) {
  if (seg->fd >= 0) close(seg->fd);
  seg->fd = -1;
}

void weft__shm_segment_release(weft__shm_segment *seg) {
  weft__shm_segment_close_fd(seg);
  if (seg->base) munmap(seg->base, seg->bytes);
  seg->base = NULL;
}

/* "\0weft-<16 hex>-<rank>": abstract (no file), private to the network namespace. The hex
 * is a keyed hash of the secret, never the secret: /proc/net/unix shows every such name to
 * every user of the host. It only has to keep communicators apart; whoever connects must
 * still prove the secret in its hello (shm_setup.c). */
static socklen_t sock_name(struct sockaddr_un *sa, const uint8_t secret[16], int rank) {
  static const char label[] = "weft shm setup socket name";
  uint64_t tag = weft__siphash(secret, label, sizeof label - 1);
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  char *p = sa->sun_path + 1;
  p += sprintf(p, "weft-%016llx-%d", (unsigned long long)tag, rank);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)(p - sa->sun_path));
}

/* Waits for events on fd until deadline_ns: 0 when ready, -1 with ETIMEDOUT or poll's errno. */
static int wait_fd(int fd, short events, uint64_t deadline_ns) {
  for (;;) {
    struct pollfd pfd = {.fd = fd, .events = events};
    int n = poll(&pfd, 1, weft__ms_left(deadline_ns));
    if (n > 0) return 0;
    if (n < 0 && errno != EINTR) return -1;
    if (n == 0 && weft__now_ns() >= deadline_ns) {
      errno = ETIMEDOUT;
      return -1;
    }
  }
}

int weft__shm_sock_listen(const uint8_t secret[16], int rank, int backlog) {
  struct sockaddr_un sa;
  socklen_t len = sock_name(&sa, secret, rank);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, backlog) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

int weft__shm_sock_connect(const uint8_t secret[16], int rank, uint64_t deadline_ns) {
  struct sockaddr_un sa;
  socklen_t len = sock_name(&sa, secret, rank);
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&sa, len) == 0) return fd;
    int e = errno;
    close(fd);
    /* Missing (not listening yet) or backlog full: try again shortly. */
    if (e != ECONNREFUSED && e != ENOENT && e != EAGAIN && e != EINTR) {
      errno = e;
      return -1;
    }
    if (weft__now_ns() >= deadline_ns) {
      errno = ETIMEDOUT;
      return -1;
    }
    usleep(1000);
  }
}

int weft__shm_sock_accept(int listen_fd, uint64_t deadline_ns) {
  for (;;) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) return fd;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    if (wait_fd(listen_fd, POLLIN, deadline_ns) != 0) return -1;
  }
}

int weft__shm_sock_send(int fd, const void *buf, size_t len, int pass_fd, uint64_t deadline_ns) {
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (pass_fd >= 0) {
    memset(&ctl, 0, sizeof ctl);
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  for (;;) {
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n == (ssize_t)len) return 0;
    if (n >= 0) {
      errno = EPROTO;
      return -1;
    }
    if (errno == EPIPE) errno = ECONNRESET;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    if (wait_fd(fd, POLLOUT, deadline_ns) != 0) return -1;
  }
}

/* Takes the first SCM_RIGHTS fd of msg into *got_fd (or closes it) and closes any others. */
static void take_fds(struct msghdr *msg, int *got_fd) {
  for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < nfd; i++) {
      int f;
      memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (got_fd && *got_fd < 0)
        *got_fd = f;
      else
        close(f);
    }
  }
}

int weft__shm_sock_recv(int fd, void *buf, size_t len, int *got_fd, uint64_t deadline_ns) {
  union {
    char buf[CMSG_SPACE(4 * sizeof(int))];
    struct cmsghdr align;
  } ctl;
  if (got_fd) *got_fd = -1;
  for (;;) {
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                         .msg_controllen = sizeof ctl.buf};
    ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n >= 0) take_fds(&msg, got_fd);
    if (n == (ssize_t)len && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) return 0;
    if (n >= 0) {
      if (got_fd && *got_fd >= 0) close(*got_fd);
      if (got_fd) *got_fd = -1;
      errno = n == 0 ? ECONNRESET : EPROTO;
      return -1;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    if (wait_fd(fd, POLLIN, deadline_ns) != 0) return -1;
  }
}

#define SEGMENT_PAGE 4096 /* one access per page: the smallest page the mappings use */

void weft__shm_prefault(void *addr, size_t len, int write_pages) {
#ifdef MADV_POPULATE_WRITE
  (void)madvise(addr, len, MADV_POPULATE_WRITE);
#endif
  if (!write_pages) return;
  volatile char *p = addr;
  for (size_t off = 0; off < len; off += SEGMENT_PAGE) p[off] = p[off];
}

void weft__shm_prefault_read(void *addr, size_t len) {
#ifdef MADV_POPULATE_READ
  (void)madvise(addr, len, MADV_POPULATE_READ);
#endif
  const volatile char *p = addr;
  for (size_t off = 0; off < len; off += SEGMENT_PAGE) (void)p[off];
}

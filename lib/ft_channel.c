/* ft_channel.c: the fault-tolerance side channel (see ft.h): a listener and a watcher thread
 * per communicator, authenticated one-message connections, and the inbox that revoke,
 * agreement and shrink read. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "lib/bootstrap.h"
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/ft.h"
#include "lib/log.h"
#include "lib/sockutil.h"
#include "lib/status.h"

#define FT_MAGIC 0x54465746u      /* "FWFT" */
#define READ_DEADLINE_MS 1000     /* a sender writes its whole message at once */
#define REPLY_DEADLINE_MS 1000

typedef struct {
  uint32_t magic;
  uint8_t secret[16];
  uint32_t type;
  int32_t from;
  uint32_t epoch, round;
  uint32_t len;
} wire_hdr;

typedef struct decided {
  uint32_t epoch;
  struct decided *next;
  uint8_t mask[];
} decided;

struct weft__ft {
  int listen_fd;
  int wake[2];             /* written at stop: ends the watcher's poll */
  pthread_t thread;
  int thread_started;
  weft__sockaddr *addrs;   /* [nranks]: every rank's listener */
  pthread_mutex_t mu;      /* guards inbox, decisions, epoch */
  pthread_cond_t cv;       /* signalled when a message enters the inbox */
  weft__ft_msg *inbox;
  decided *decisions;
  uint32_t epoch;
  uint32_t sync_asked, sync_done; /* weft__ft_sync's numbers: the last asked, the last handled */
};

static size_t mask_bytes(const struct weft_comm *comm) { return weft__agree_mask_bytes(comm->nranks); }

/* Constant time, so a wrong secret's timing tells nothing of the right one. */
static int same_secret(const uint8_t *a, const uint8_t *b) {
  uint8_t d = 0;
  for (int i = 0; i < 16; i++) d |= (uint8_t)(a[i] ^ b[i]);
  return d == 0;
}

/* Reads and checks one message; NULL (and nothing believed) unless it proves the secret
 * and its fields are in range. */
static weft__ft_msg *read_msg(struct weft_comm *comm, int fd) {
  uint64_t deadline = weft__deadline_after_ms(READ_DEADLINE_MS);
  wire_hdr h;
  if (weft__sock_recv_all(fd, &h, sizeof(h), deadline) != 0) return NULL; /* a probe: EOF */
  if (h.magic != FT_MAGIC || !same_secret(h.secret, comm->secret)) {
    WEFT_WARN("rank %d: fault-tolerance channel: dropped a message without this "
              "communicator's secret", comm->rank);
    return NULL;
  }
  if (h.from < 0 || h.from >= comm->nranks || h.len > WEFT__FT_MAX_PAYLOAD) return NULL;
  weft__ft_msg *m = malloc(sizeof(*m) + h.len);
  if (m == NULL) return NULL;
  *m = (weft__ft_msg){h.type, h.from, h.epoch, h.round, h.len, NULL};
  if (h.len > 0 && weft__sock_recv_all(fd, m->payload, h.len, deadline) != 0) {
    free(m);
    return NULL;
  }
  return m;
}

static const decided *find_decided(struct weft__ft *ft, uint32_t epoch) {
  for (const decided *d = ft->decisions; d != NULL; d = d->next)
    if (d->epoch == epoch) return d;
  return NULL;
}

static void handle(struct weft_comm *comm, weft__ft_msg *m) {
  struct weft__ft *ft = comm->ft;
  if (m->type == WEFT__FT_PING) {
    free(m);
    return;
  }
  if (m->type == WEFT__FT_SYNC) {
    pthread_mutex_lock(&ft->mu);
    if (m->from == comm->rank && (int32_t)(m->round - ft->sync_done) > 0) ft->sync_done = m->round;
    pthread_cond_broadcast(&ft->cv);
    pthread_mutex_unlock(&ft->mu);
    free(m);
    return;
  }
  if (m->type == WEFT__FT_REVOKE) {
    int by = m->round < (uint32_t)comm->nranks ? (int)m->round : m->from; /* the revoker */
    weft__comm_mark_revoked(comm, by, 1); /* relays it the first time */
    free(m);
    return;
  }
  /* One lock hold for the look-up and the enqueue: weft__ft_set_decided records a decision
   * and answers the AGREEs already queued under the same lock, so a late AGREE is answered
   * by one of the two, never by neither. */
  uint8_t mask[WEFT__FT_MAX_PAYLOAD];
  pthread_mutex_lock(&ft->mu);
  const decided *d = m->type == WEFT__FT_AGREE || m->type == WEFT__FT_DECIDED ? find_decided(ft, m->epoch) : NULL;
  if (d != NULL && m->type == WEFT__FT_DECIDED) { /* a relay of what this rank holds already */
    pthread_mutex_unlock(&ft->mu);
    free(m);
    return;
  }
  if (d != NULL) {
    memcpy(mask, d->mask, mask_bytes(comm));
  } else {
    weft__ft_msg **tail = &ft->inbox;
    while (*tail != NULL) tail = &(*tail)->next;
    *tail = m;
    pthread_cond_broadcast(&ft->cv);
  }
  pthread_mutex_unlock(&ft->mu);
  if (d != NULL) { /* a survivor still agreeing on an epoch decided here */
    int to = m->from;
    weft__ft_send(comm, &to, 1, WEFT__FT_DECIDED, m->epoch, 0, mask, (uint32_t)mask_bytes(comm), NULL,
                  weft__deadline_after_ms(REPLY_DEADLINE_MS));
    free(m);
  }
}

/* The watcher: waits for connections until stop (no deadline: it serves the communicator's
 * whole life and ends on the wake pipe). */
static void *watch(void *arg) {
  struct weft_comm *comm = arg;
  struct weft__ft *ft = comm->ft;
  for (;;) {
    struct pollfd p[2] = {{.fd = ft->listen_fd, .events = POLLIN}, {.fd = ft->wake[0], .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents) break;
    if (!(p[0].revents & POLLIN)) continue;
    int fd = accept4(ft->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    weft__sock_set_nonblock(fd, 0);
    weft__ft_msg *m = read_msg(comm, fd);
    close(fd);
    if (m != NULL) handle(comm, m);
  }
  return NULL;
}

static void free_ft(struct weft__ft *ft) {
  if (ft->listen_fd >= 0) close(ft->listen_fd);
  if (ft->wake[0] >= 0) close(ft->wake[0]), close(ft->wake[1]);
  while (ft->inbox != NULL) {
    weft__ft_msg *m = ft->inbox;
    ft->inbox = m->next;
    free(m);
  }
  while (ft->decisions != NULL) {
    decided *d = ft->decisions;
    ft->decisions = d->next;
    free(d);
  }
  free(ft->addrs);
  pthread_mutex_destroy(&ft->mu);
  pthread_cond_destroy(&ft->cv);
  free(ft);
}

weft_status_t weft__ft_start(struct weft_comm *comm) {
  struct weft__ft *ft = calloc(1, sizeof(*ft));
  if (ft == NULL) return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: init: out of memory", comm->rank);
  ft->listen_fd = -1;
  ft->wake[0] = ft->wake[1] = -1;
  pthread_mutex_init(&ft->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&ft->cv, &ca);
  pthread_condattr_destroy(&ca);
  ft->addrs = calloc((size_t)comm->nranks, sizeof(*ft->addrs));
  if (ft->addrs == NULL) {
    free_ft(ft);
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: init: out of memory", comm->rank);
  }
  weft__sockaddr me;
  weft_status_t st = weft__sockaddr_pick_local(&me, NULL, 0);
  if (st == WEFT_SUCCESS && (ft->listen_fd = weft__sock_listen(&me, 128)) < 0)
    st = weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: init: fault-tolerance listener: %s", comm->rank,
                     strerror(errno));
  if (st == WEFT_SUCCESS && pipe2(ft->wake, O_CLOEXEC) != 0)
    st = weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: init: pipe: %s", comm->rank, strerror(errno));
  /* Every rank runs this round, even one whose listener failed, so none waits for it; a
   * zero-length address then says "no channel" (revoke and shrink skip that rank). */
  if (st != WEFT_SUCCESS) memset(&me, 0, sizeof(me));
  weft_status_t gst = weft__bootstrap_allgather(comm, &me, sizeof(me), ft->addrs);
  if (st == WEFT_SUCCESS) st = gst;
  comm->ft = ft;
  if (st == WEFT_SUCCESS) {
    int rc = pthread_create(&ft->thread, NULL, watch, comm);
    if (rc != 0) st = weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: init: watcher thread: %s", comm->rank, strerror(rc));
    else ft->thread_started = 1;
  }
  if (st != WEFT_SUCCESS) weft__ft_stop(comm);
  return st;
}

void weft__ft_stop(struct weft_comm *comm) {
  struct weft__ft *ft = comm->ft;
  if (ft == NULL) return;
  if (ft->thread_started) {
    char b = 1;
    if (write(ft->wake[1], &b, 1) < 0) WEFT_WARN("rank %d: waking the watcher: %s", comm->rank, strerror(errno));
    pthread_join(ft->thread, NULL);
  }
  comm->ft = NULL;
  free_ft(ft);
}

enum { SENT = 1, GONE = 0, SILENT = -1, PENDING = 2 };

static int push(int fd, const void *buf, size_t len) {
  ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == (ssize_t)len) return SENT;
  return n < 0 && (errno == ECONNREFUSED || errno == ECONNRESET || errno == EPIPE) ? GONE : SILENT;
}

void weft__ft_send(struct weft_comm *comm, const int *to, int n, uint32_t type, uint32_t epoch,
                   uint32_t round, const void *payload, uint32_t len, int *result,
                   uint64_t deadline_ns) {
  struct weft__ft *ft = comm->ft;
  size_t total = sizeof(wire_hdr) + len;
  unsigned char *buf = malloc(total);
  int *fd = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  int *res = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  if (buf == NULL || fd == NULL || res == NULL || ft == NULL) {
    for (int i = 0; i < n && result != NULL; i++) result[i] = SILENT;
    free(buf), free(fd), free(res);
    return;
  }
  wire_hdr h = {FT_MAGIC, {0}, type, comm->rank, epoch, round, len};
  memcpy(h.secret, comm->secret, 16);
  memcpy(buf, &h, sizeof(h));
  if (len > 0) memcpy(buf + sizeof(h), payload, len);
  /* All connects start at once: a host that went silent costs one deadline, not one each. */
  for (int i = 0; i < n; i++) {
    fd[i] = -1;
    res[i] = GONE;
    const weft__sockaddr *a = &ft->addrs[to[i]];
    if (a->len == 0) continue;
    fd[i] = socket(a->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd[i] < 0) {
      res[i] = SILENT;
      continue;
    }
    if (connect(fd[i], (const struct sockaddr *)&a->ss, a->len) == 0) res[i] = push(fd[i], buf, total);
    else res[i] = errno == EINPROGRESS ? PENDING : errno == ECONNREFUSED ? GONE : SILENT;
  }
  for (;;) {
    struct pollfd p[256];
    int idx[256], np = 0;
    for (int i = 0; i < n && np < 256; i++)
      if (res[i] == PENDING) p[np] = (struct pollfd){.fd = fd[i], .events = POLLOUT}, idx[np++] = i;
    uint64_t now = weft__now_ns();
    if (np == 0 || now >= deadline_ns) break;
    int ms = (int)((deadline_ns - now) / 1000000ull) + 1;
    if (poll(p, (nfds_t)np, ms) < 0 && errno != EINTR) break;
    for (int k = 0; k < np; k++) {
      if (p[k].revents == 0) continue;
      int err = 0;
      socklen_t el = sizeof(err);
      getsockopt(p[k].fd, SOL_SOCKET, SO_ERROR, &err, &el);
      res[idx[k]] = err == 0 ? push(p[k].fd, buf, total) : err == ECONNREFUSED || err == ECONNRESET ? GONE : SILENT;
    }
  }
  for (int i = 0; i < n; i++) {
    if (res[i] == PENDING) res[i] = SILENT;
    if (fd[i] >= 0) close(fd[i]);
    if (result != NULL) result[i] = res[i];
  }
  free(buf), free(fd), free(res);
}

int weft__ft_sync(struct weft_comm *comm, int wait_ms) {
  struct weft__ft *ft = comm->ft;
  if (ft == NULL) return 0;
  uint64_t deadline = weft__deadline_after_ms(wait_ms);
  pthread_mutex_lock(&ft->mu);
  uint32_t mine = ++ft->sync_asked;
  pthread_mutex_unlock(&ft->mu);
  int self = comm->rank, sent = 0;
  weft__ft_send(comm, &self, 1, WEFT__FT_SYNC, 0, mine, NULL, 0, &sent, deadline);
  if (sent != 1) return 0;
  struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
  pthread_mutex_lock(&ft->mu);
  int done;
  for (;;) {
    done = (int32_t)(ft->sync_done - mine) >= 0;
    if (done || pthread_cond_timedwait(&ft->cv, &ft->mu, &ts) == ETIMEDOUT) break;
  }
  pthread_mutex_unlock(&ft->mu);
  return done;
}

int weft__ft_probe(struct weft_comm *comm, int rank, int wait_ms) {
  int r;
  weft__ft_send(comm, &rank, 1, WEFT__FT_PING, 0, 0, NULL, 0, &r, weft__deadline_after_ms(wait_ms));
  return r;
}

weft__ft_msg *weft__ft_take(struct weft_comm *comm, uint32_t type, uint32_t epoch, uint32_t round,
                            int from, int wait_ms) {
  struct weft__ft *ft = comm->ft;
  if (ft == NULL) return NULL;
  uint64_t deadline = weft__deadline_after_ms(wait_ms);
  struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
  weft__ft_msg *found = NULL;
  pthread_mutex_lock(&ft->mu);
  for (;;) {
    for (weft__ft_msg **pp = &ft->inbox; *pp != NULL; pp = &(*pp)->next) {
      weft__ft_msg *m = *pp;
      if (m->type == type && m->epoch == epoch && (round == ~0u || m->round == round) &&
          (from < 0 || m->from == from)) {
        *pp = m->next;
        found = m;
        break;
      }
    }
    if (found != NULL || pthread_cond_timedwait(&ft->cv, &ft->mu, &ts) == ETIMEDOUT) break;
  }
  pthread_mutex_unlock(&ft->mu);
  return found;
}

void weft__ft_set_decided(struct weft_comm *comm, uint32_t epoch, const uint8_t *mask) {
  struct weft__ft *ft = comm->ft;
  decided *d = malloc(sizeof(*d) + mask_bytes(comm));
  char *tell = calloc((size_t)comm->nranks, 1);
  int *to = malloc(sizeof(int) * (size_t)comm->nranks), n = 0;
  if (ft == NULL || d == NULL || tell == NULL || to == NULL) {
    free(d), free(tell), free(to);
    return;
  }
  d->epoch = epoch;
  memcpy(d->mask, mask, mask_bytes(comm));
  /* Every rank this one counts alive hears the decision before this rank leaves (see ft.h:
   * a rank gone after deciding looks dead to one still agreeing). So do the senders of
   * AGREEs of this epoch that came before the decision was recorded: they are still
   * agreeing and the watcher answered none of them; one counted failed learns so. */
  for (int p = 0; p < comm->nranks; p++) tell[p] = p != comm->rank && !weft__mask_has(mask, p);
  pthread_mutex_lock(&ft->mu);
  d->next = ft->decisions;
  ft->decisions = d;
  for (weft__ft_msg **pp = &ft->inbox; *pp != NULL;) {
    weft__ft_msg *m = *pp;
    if ((m->type != WEFT__FT_AGREE && m->type != WEFT__FT_DECIDED) || m->epoch != epoch) {
      pp = &m->next;
      continue;
    }
    *pp = m->next; /* a DECIDED here is another rank's copy of this decision */
    if (m->type == WEFT__FT_AGREE) tell[m->from] = 1;
    free(m);
  }
  pthread_mutex_unlock(&ft->mu);
  for (int p = 0; p < comm->nranks; p++)
    if (tell[p]) to[n++] = p;
  if (n > 0)
    weft__ft_send(comm, to, n, WEFT__FT_DECIDED, epoch, 0, mask, (uint32_t)mask_bytes(comm), NULL,
                  weft__deadline_after_ms(REPLY_DEADLINE_MS));
  free(tell), free(to);
}

uint32_t weft__ft_next_epoch(struct weft_comm *comm) {
  struct weft__ft *ft = comm->ft;
  pthread_mutex_lock(&ft->mu);
  uint32_t e = ++ft->epoch;
  pthread_mutex_unlock(&ft->mu);
  return e;
}

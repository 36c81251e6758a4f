/* bootstrap_root.c: the bootstrap root, a thread that admits ranks presenting the unique id's
 * secret, then serves all-gather rounds, and tells every rank when one of them fails.
 *
 * Lifetime: it exits when every rank has said goodbye, when a rank fails (after telling the
 * others), or when ranks do not all join by their deadline (after telling the joined ones
 * which ranks are missing). It never blocks on one rank for long: each message is read
 * within a short deadline once poll() says it has started to arrive. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lib/bootstrap.h"
#include "lib/bootstrap_wire.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "lib/status.h"

#define IO_DEADLINE_MS 10000 /* for one message once it started arriving */
#define MAX_PENDING 1024     /* accepted connections that have not said hello yet */

enum { SLOT_EMPTY = 0, SLOT_JOINED, SLOT_LEFT };

typedef struct {
  int fd;
  int state;
  uint64_t deadline_ns; /* join deadline the rank asked for */
  char *blob;           /* this round's all-gather contribution */
  uint32_t blob_len;
  int has_blob;
} root_rank;

typedef struct {
  int listen_fd;
  uint8_t secret[16];
  uint64_t idle_deadline_ns; /* before anyone joins */
  int nranks;                /* 0 until the first hello */
  int njoined, nleft, ready, done;
  char conflict[200];        /* ranks disagreed on nranks: every hello is refused with this */
  root_rank *ranks;
  int pending[MAX_PENDING];
  int npending;
} root_state;

static void send_msg(int fd, uint32_t type, const void *a, uint32_t alen, const void *b,
                     uint32_t blen) {
  weft__bs_header h = {type, alen + blen};
  uint64_t dl = weft__deadline_after_ms(IO_DEADLINE_MS);
  if (weft__sock_send_all(fd, &h, sizeof(h), dl) != 0) return;
  if (alen > 0 && weft__sock_send_all(fd, a, alen, dl) != 0) return;
  if (blen > 0) weft__sock_send_all(fd, b, blen, dl);
}

static void send_text(int fd, uint32_t type, int32_t code, const char *text) {
  send_msg(fd, type, &code, sizeof(code), text, (uint32_t)strlen(text) + 1);
}

static void close_rank(root_rank *r) {
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
  free(r->blob);
  r->blob = NULL;
  r->has_blob = 0;
}

/* Tells every rank still connected that `failed` is gone, then ends the root. */
static void fail_all(root_state *s, int failed, const char *why) {
  char text[256];
  snprintf(text, sizeof(text), "rank %d %s", failed, why);
  WEFT_INFO("bootstrap root: %s; telling the other ranks", text);
  for (int r = 0; r < s->nranks; r++) {
    if (s->ranks[r].state == SLOT_JOINED && r != failed)
      send_text(s->ranks[r].fd, WEFT__BS_FAILED, failed, text);
    close_rank(&s->ranks[r]);
  }
  s->done = 1;
}

static void reject(int fd, weft_status_t st, const char *text) {
  send_text(fd, WEFT__BS_REJECT, (int32_t)st, text);
  close(fd);
}

/* Constant-time comparison so the secret cannot be guessed byte by byte from timing. */
static int secret_ok(const uint8_t *a, const uint8_t *b) {
  uint8_t diff = 0;
  for (int i = 0; i < 16; i++) diff |= a[i] ^ b[i];
  return diff == 0;
}

/* WEFT_SUCCESS when h may join, else the status to refuse it with and why. */
static weft_status_t hello_problem(root_state *s, const weft__bs_hello *h, char *why, size_t len) {
  if (h->magic != WEFT__ID_MAGIC || !secret_ok(h->secret, s->secret)) {
    snprintf(why, len, "wrong unique id secret");
    return WEFT_ERR_AUTH;
  }
  if (s->conflict[0]) {
    snprintf(why, len, "%s", s->conflict);
    return WEFT_ERR_INVALID_USAGE;
  }
  if (s->ready) {
    snprintf(why, len,
             "rank %d: this unique id's communicator of %d ranks is already complete; a unique id "
             "serves one communicator (make a new one with weft_get_unique_id)", h->rank, s->nranks);
    return WEFT_ERR_INVALID_USAGE;
  }
  if (h->nranks < 1 || h->rank < 0 || h->rank >= h->nranks) {
    snprintf(why, len, "rank %d of %d is out of range", h->rank, h->nranks);
    return WEFT_ERR_AUTH;
  }
  if (s->nranks != 0 && h->nranks != s->nranks) {
    snprintf(s->conflict, sizeof(s->conflict),
             "the ranks disagree on the number of ranks: rank %d says %d, earlier ranks said %d",
             h->rank, h->nranks, s->nranks);
    snprintf(why, len, "%s", s->conflict);
    return WEFT_ERR_INVALID_USAGE;
  }
  if (s->nranks != 0 && s->ranks[h->rank].state != SLOT_EMPTY) {
    snprintf(why, len, "rank %d joined twice", h->rank);
    return WEFT_ERR_AUTH;
  }
  return WEFT_SUCCESS;
}

static void admit(root_state *s, int fd, const weft__bs_hello *h) {
  if (s->nranks == 0) {
    s->ranks = calloc((size_t)h->nranks, sizeof(root_rank));
    if (s->ranks == NULL) {
      reject(fd, WEFT_ERR_NO_MEMORY, "bootstrap root out of memory");
      return;
    }
    for (int r = 0; r < h->nranks; r++) s->ranks[r].fd = -1;
    s->nranks = h->nranks;
  }
  root_rank *r = &s->ranks[h->rank];
  r->fd = fd;
  r->state = SLOT_JOINED;
  r->deadline_ns = weft__deadline_after_ms(h->timeout_ms > 0 ? h->timeout_ms : 120000);
  if (++s->njoined < s->nranks) return;
  s->ready = 1;
  for (int i = 0; i < s->nranks; i++) send_msg(s->ranks[i].fd, WEFT__BS_READY, NULL, 0, NULL, 0);
  /* Keep listening: a late rank reusing this id is told why at once instead of timing out. */
}

/* After a conflict on nranks, the ranks already waiting are told at once, not at their
 * deadline; the root keeps listening until its idle deadline to tell late ranks too. */
static void refuse_joined(root_state *s) {
  for (int r = 0; r < s->nranks; r++) {
    if (s->ranks[r].state != SLOT_JOINED) continue;
    send_text(s->ranks[r].fd, WEFT__BS_REJECT, WEFT_ERR_INVALID_USAGE, s->conflict);
    close_rank(&s->ranks[r]);
    s->ranks[r].state = SLOT_LEFT;
  }
}

static void on_hello(root_state *s, int fd) {
  weft__bs_header hd;
  weft__bs_hello h;
  uint64_t dl = weft__deadline_after_ms(IO_DEADLINE_MS);
  if (weft__sock_recv_all(fd, &hd, sizeof(hd), dl) != 0 || hd.type != WEFT__BS_HELLO ||
      hd.len != sizeof(h) || weft__sock_recv_all(fd, &h, sizeof(h), dl) != 0) {
    close(fd); /* not a weft rank, or gone already */
    return;
  }
  char why[200];
  weft_status_t st = hello_problem(s, &h, why, sizeof(why));
  if (st != WEFT_SUCCESS) {
    WEFT_WARN("bootstrap root: rejected a rank: %s", why);
    reject(fd, st, why);
    if (s->conflict[0]) refuse_joined(s);
    return;
  }
  admit(s, fd, &h);
}

static void finish_round(root_state *s) {
  for (int r = 0; r < s->nranks; r++)
    if (!s->ranks[r].has_blob) return;
  uint32_t each = s->ranks[0].blob_len;
  for (int r = 1; r < s->nranks; r++)
    if (s->ranks[r].blob_len != each) {
      fail_all(s, r, "sent a bootstrap all-gather of a different size (internal error)");
      return;
    }
  char *all = malloc((size_t)each * (size_t)s->nranks + 1);
  if (all == NULL) {
    fail_all(s, -1, "(the bootstrap root) ran out of memory");
    return;
  }
  for (int r = 0; r < s->nranks; r++) {
    if (each > 0) memcpy(all + (size_t)r * each, s->ranks[r].blob, each);
    free(s->ranks[r].blob);
    s->ranks[r].blob = NULL;
    s->ranks[r].has_blob = 0;
  }
  for (int r = 0; r < s->nranks; r++)
    send_msg(s->ranks[r].fd, WEFT__BS_GATHERED, all, each * (uint32_t)s->nranks, NULL, 0);
  free(all);
}

static void on_rank_message(root_state *s, int rank) {
  root_rank *r = &s->ranks[rank];
  weft__bs_header hd;
  uint64_t dl = weft__deadline_after_ms(IO_DEADLINE_MS);
  if (weft__sock_recv_all(r->fd, &hd, sizeof(hd), dl) != 0) {
    fail_all(s, rank, "exited or closed its bootstrap connection without destroying its communicator");
    return;
  }
  if (hd.type == WEFT__BS_BYE) {
    close_rank(r);
    r->state = SLOT_LEFT;
    if (++s->nleft == s->nranks) s->done = 1;
    return;
  }
  if (hd.type != WEFT__BS_GATHER || hd.len > WEFT__BS_MAX_PAYLOAD || r->has_blob || !s->ready) {
    fail_all(s, rank, "sent an unexpected bootstrap message (internal error)");
    return;
  }
  r->blob = malloc(hd.len + 1);
  if (r->blob == NULL || weft__sock_recv_all(r->fd, r->blob, hd.len, dl) != 0) {
    fail_all(s, rank, "failed while sending its bootstrap data");
    return;
  }
  r->blob_len = hd.len;
  r->has_blob = 1;
  finish_round(s);
}

static void time_out_join(root_state *s) {
  char text[512];
  int n = snprintf(text, sizeof(text), "only %d of %d ranks joined before the deadline; missing ranks:",
                   s->njoined, s->nranks);
  for (int r = 0; r < s->nranks && n < (int)sizeof(text) - 8; r++)
    if (s->ranks[r].state == SLOT_EMPTY) n += snprintf(text + n, sizeof(text) - (size_t)n, " %d", r);
  WEFT_WARN("bootstrap root: %s", text);
  for (int r = 0; r < s->nranks; r++) {
    if (s->ranks[r].state == SLOT_JOINED) send_text(s->ranks[r].fd, WEFT__BS_REJECT, WEFT_ERR_TIMEOUT, text);
    close_rank(&s->ranks[r]);
  }
  s->done = 1;
}

/* The earliest deadline that matters now: before all joined, the first joined rank's. */
static uint64_t next_deadline(const root_state *s) {
  if (s->ready) return UINT64_MAX;
  if (s->nranks == 0 || s->conflict[0]) return s->idle_deadline_ns;
  uint64_t d = UINT64_MAX;
  for (int r = 0; r < s->nranks; r++)
    if (s->ranks[r].state == SLOT_JOINED && s->ranks[r].deadline_ns < d) d = s->ranks[r].deadline_ns;
  return d;
}

static int build_pollset(root_state *s, struct pollfd *p, int *who) {
  int n = 0;
  if (s->listen_fd >= 0) { p[n] = (struct pollfd){s->listen_fd, POLLIN, 0}; who[n++] = -1; }
  for (int i = 0; i < s->npending; i++) { p[n] = (struct pollfd){s->pending[i], POLLIN, 0}; who[n++] = -2 - i; }
  for (int r = 0; r < s->nranks; r++)
    if (s->ranks[r].state == SLOT_JOINED) { p[n] = (struct pollfd){s->ranks[r].fd, POLLIN, 0}; who[n++] = r; }
  return n;
}

static void serve_once(root_state *s, struct pollfd *p, int *who) {
  int n = build_pollset(s, p, who);
  uint64_t dl = next_deadline(s);
  int ms = dl == UINT64_MAX ? 1000 : weft__ms_left(dl);
  int rc = poll(p, (nfds_t)n, ms);
  if (rc < 0 && errno != EINTR) { fail_all(s, -1, "(the bootstrap root) failed in poll"); return; }
  if (weft__now_ns() >= dl) {
    if (s->nranks == 0 || s->conflict[0]) s->done = 1; else time_out_join(s);
    return;
  }
  int handled_pending = 0;
  for (int i = 0; i < n && !s->done; i++) {
    if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (who[i] == -1) {
      int fd = weft__sock_accept(s->listen_fd, weft__deadline_after_ms(0));
      if (fd >= 0 && s->npending < MAX_PENDING) s->pending[s->npending++] = fd;
      else if (fd >= 0) close(fd);
    } else if (who[i] <= -2) {
      int idx = -2 - who[i];
      on_hello(s, s->pending[idx]);
      s->pending[idx] = -1;
      handled_pending = 1;
    } else {
      on_rank_message(s, who[i]);
    }
  }
  if (handled_pending) { /* compact the pending list */
    int k = 0;
    for (int i = 0; i < s->npending; i++) if (s->pending[i] >= 0) s->pending[k++] = s->pending[i];
    s->npending = k;
  }
}

static void *root_main(void *arg) {
  root_state *s = arg;
  size_t cap = 1 + MAX_PENDING;
  struct pollfd *p = NULL;
  int *who = NULL;
  while (!s->done) {
    size_t need = cap + (size_t)s->nranks;
    p = realloc(p, need * sizeof(*p));
    who = realloc(who, need * sizeof(*who));
    if (p == NULL || who == NULL) break;
    serve_once(s, p, who);
  }
  for (int i = 0; i < s->npending; i++) close(s->pending[i]);
  for (int r = 0; r < s->nranks; r++) close_rank(&s->ranks[r]);
  if (s->listen_fd >= 0) close(s->listen_fd);
  free(s->ranks);
  free(p);
  free(who);
  free(s);
  return NULL;
}

weft_status_t weft__bootstrap_root_start(weft__sockaddr *addr, const uint8_t secret[16],
                                         int join_timeout_ms) {
  root_state *s = calloc(1, sizeof(*s));
  if (s == NULL) return weft__error(NULL, WEFT_ERR_NO_MEMORY, "bootstrap root: out of memory");
  s->listen_fd = weft__sock_listen(addr, 4096);
  if (s->listen_fd < 0) {
    char where[80];
    weft_status_t st = weft__error(NULL, WEFT_ERR_SYSTEM, "bootstrap root: cannot listen on %s: %s",
                                   weft__sockaddr_str(addr, where, sizeof(where)), strerror(errno));
    free(s);
    return st;
  }
  memcpy(s->secret, secret, 16);
  s->idle_deadline_ns = weft__deadline_after_ms(join_timeout_ms > 0 ? join_timeout_ms : 120000);
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &attr, root_main, s);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    close(s->listen_fd);
    free(s);
    return weft__error(NULL, WEFT_ERR_SYSTEM, "bootstrap root: cannot start thread: %s", strerror(rc));
  }
  return WEFT_SUCCESS;
}

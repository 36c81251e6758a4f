/* bootstrap_root.c: the bootstrap root, a thread that admits ranks presenting the unique id's
 * secret, then serves all-gather rounds, and tells every rank when one of them fails.
 *
 * Lifetime: it exits when every rank has said goodbye, when a rank fails (after telling the
 * others), or when ranks do not all join by their deadline (after telling the joined ones
 * which ranks are missing). It never blocks on one rank for long: each message of an
 * admitted rank is read within a short deadline once poll() says it has started to arrive,
 * and connections that have not proved the secret are never waited on at all (see
 * HELLO_DEADLINE_MS below): anyone can connect, so they must cost the root next to nothing.
 * Thread safety: the root's state belongs to its thread alone. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "lib/bootstrap.h"
#include "lib/bootstrap_wire.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "lib/status.h"

#define IO_DEADLINE_MS 10000 /* for one message of an admitted rank once it started arriving */
/* Unauthenticated connections: each must deliver its whole hello within HELLO_DEADLINE_MS
 * of its accept (a real rank sends it at once, in one segment); at most MAX_PENDING wait at
 * a time, and a new one evicts the oldest. So idle or trickling clients cost the root one
 * slot each for a few seconds, and never stall it: a hello is read without blocking, a
 * few bytes per poll() wake-up if that is how it comes. */
#define HELLO_DEADLINE_MS 5000
#define MAX_PENDING 256
#define PAGE_RANKS 1024      /* the rank table grows in pages as ranks join */
#define EMFILE_PAUSE_MS 10   /* out of descriptors with nothing to shed: stop accepting briefly */

enum { SLOT_EMPTY = 0, SLOT_JOINED, SLOT_LEFT };

typedef struct {
  int fd;
  int state;
  uint64_t deadline_ns; /* join deadline the rank asked for */
  char *blob;           /* this round's all-gather contribution */
  uint32_t blob_len;
  int has_blob;
} root_rank;

/* An accepted connection that has not proved the secret yet: its hello so far. */
typedef struct {
  int fd;
  uint64_t deadline_ns;
  uint32_t got;
  uint8_t buf[sizeof(weft__bs_header) + sizeof(weft__bs_hello)];
} pending_conn;

typedef struct {
  int listen_fd;
  int reserve_fd;            /* an fd kept open to be given up when accept() hits EMFILE */
  uint64_t accept_paused_until;
  uint8_t secret[16];
  uint64_t idle_deadline_ns; /* before anyone joins */
  uint64_t join_deadline_ns; /* the earliest deadline of a joined rank (UINT64_MAX: none) */
  int nranks;                /* 0 until the first hello */
  int host_rank;             /* the rank whose process this root runs in, -1: none (yet) */
  int njoined, nleft, ready, done;
  char conflict[200];        /* ranks disagreed on nranks: every hello is refused with this */
  root_rank **pages;         /* [ceil(nranks / PAGE_RANKS)], each NULL until a rank in it joins */
  pending_conn pending[MAX_PENDING]; /* oldest first */
  int npending;
} root_state;

/* Rank r's slot, or NULL when no rank of its page has joined (then it is empty). */
static root_rank *slot(const root_state *s, int r) {
  root_rank *page = s->pages[r / PAGE_RANKS];
  return page != NULL ? &page[r % PAGE_RANKS] : NULL;
}

/* Rank r's slot, allocating its page; NULL when out of memory. */
static root_rank *slot_make(root_state *s, int r) {
  root_rank **page = &s->pages[r / PAGE_RANKS];
  if (*page == NULL) {
    if ((*page = calloc(PAGE_RANKS, sizeof(root_rank))) == NULL) return NULL;
    for (int i = 0; i < PAGE_RANKS; i++) (*page)[i].fd = -1;
  }
  return &(*page)[r % PAGE_RANKS];
}

static int state_of(const root_state *s, int r) {
  const root_rank *x = slot(s, r);
  return x != NULL ? x->state : SLOT_EMPTY;
}

/* The first allocated slot at or after *r (advancing *r to it), or NULL: loops over the
 * table skip the pages no rank joined, so a huge nranks costs nothing until ranks come. */
static root_rank *next_slot(const root_state *s, int *r) {
  while (*r < s->nranks) {
    root_rank *page = s->pages[*r / PAGE_RANKS];
    if (page != NULL) return &page[*r % PAGE_RANKS];
    *r = (*r / PAGE_RANKS + 1) * PAGE_RANKS;
  }
  return NULL;
}

/* for each allocated slot x (rank r); a break leaves it */
#define FOR_EACH_SLOT(s, r, x) \
  for (int r = 0; r >= 0; r = -1) \
    for (root_rank *x; (x = next_slot((s), &r)) != NULL; r++)

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
  FOR_EACH_SLOT(s, r, x) {
    if (x->state == SLOT_JOINED && r != failed) send_text(x->fd, WEFT__BS_FAILED, failed, text);
    close_rank(x);
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
  if (h->nranks < 1 || h->nranks > WEFT__BS_MAX_RANKS || h->rank < 0 || h->rank >= h->nranks) {
    snprintf(why, len, "rank %d of %d is out of range (at most %d ranks)", h->rank, h->nranks,
             WEFT__BS_MAX_RANKS);
    return WEFT_ERR_AUTH;
  }
  if (s->nranks != 0 && h->nranks != s->nranks) {
    snprintf(s->conflict, sizeof(s->conflict),
             "the ranks disagree on the number of ranks: rank %d says %d, earlier ranks said %d",
             h->rank, h->nranks, s->nranks);
    snprintf(why, len, "%s", s->conflict);
    return WEFT_ERR_INVALID_USAGE;
  }
  if (s->nranks != 0 && state_of(s, h->rank) != SLOT_EMPTY) {
    snprintf(why, len, "rank %d joined twice", h->rank);
    return WEFT_ERR_AUTH;
  }
  return WEFT_SUCCESS;
}

static void admit(root_state *s, int fd, const weft__bs_hello *h) {
  if (s->nranks == 0) { /* only the page table now: pages come as ranks join */
    s->pages = calloc((size_t)(h->nranks + PAGE_RANKS - 1) / PAGE_RANKS, sizeof(*s->pages));
    if (s->pages == NULL) {
      reject(fd, WEFT_ERR_NO_MEMORY, "bootstrap root out of memory");
      return;
    }
    s->nranks = h->nranks;
  }
  root_rank *r = slot_make(s, h->rank);
  if (r == NULL) {
    reject(fd, WEFT_ERR_NO_MEMORY, "bootstrap root out of memory");
    return;
  }
  weft__sock_set_nonblock(fd, 0);
  r->fd = fd;
  r->state = SLOT_JOINED;
  r->deadline_ns = weft__deadline_after_ms(h->timeout_ms > 0 ? h->timeout_ms : 120000);
  if (r->deadline_ns < s->join_deadline_ns) s->join_deadline_ns = r->deadline_ns;
  if (h->pid == (int32_t)getpid()) s->host_rank = h->rank;
  if (++s->njoined < s->nranks) return;
  s->ready = 1;
  int32_t host = s->host_rank;
  FOR_EACH_SLOT(s, i, x) send_msg(x->fd, WEFT__BS_READY, &host, sizeof(host), NULL, 0);
  /* Keep listening: a late rank reusing this id is told why at once instead of timing out. */
}

/* After a conflict on nranks, the ranks already waiting are told at once, not at their
 * deadline; the root keeps listening until its idle deadline to tell late ranks too. */
static void refuse_joined(root_state *s) {
  FOR_EACH_SLOT(s, r, x) {
    if (x->state != SLOT_JOINED) continue;
    send_text(x->fd, WEFT__BS_REJECT, WEFT_ERR_INVALID_USAGE, s->conflict);
    close_rank(x);
    x->state = SLOT_LEFT;
  }
}

/* A complete hello came on pending connection fd: admit or refuse it. */
static void on_hello(root_state *s, int fd, const pending_conn *c) {
  weft__bs_hello h;
  if (weft__bs_parse_hello(c->buf, c->got, &h) != 0) {
    close(fd); /* not a weft rank */
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

static void drop_pending(root_state *s, int i) {
  if (s->pending[i].fd >= 0) close(s->pending[i].fd);
  memmove(&s->pending[i], &s->pending[i + 1], (size_t)(s->npending - i - 1) * sizeof(s->pending[0]));
  s->npending--;
}

/* Reads what has come of pending connection i's hello, without waiting; handles it once
 * whole. Returns 1 when the connection left the pending list. */
static int read_pending(root_state *s, int i) {
  pending_conn *c = &s->pending[i];
  ssize_t n = recv(c->fd, c->buf + c->got, sizeof(c->buf) - c->got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  if (n <= 0) { /* closed or failed before its hello: nothing to say to it */
    drop_pending(s, i);
    return 1;
  }
  c->got += (uint32_t)n;
  if (c->got < sizeof(weft__bs_header) ||
      (c->got < sizeof(c->buf) && ((weft__bs_header *)c->buf)->type == WEFT__BS_HELLO))
    return 0;
  pending_conn whole = *c; /* a wrong header is judged at once, not at its deadline */
  s->pending[i].fd = -1;
  drop_pending(s, i);
  on_hello(s, whole.fd, &whole);
  return 1;
}

static void add_pending(root_state *s, int fd) {
  if (s->npending == MAX_PENDING) drop_pending(s, 0); /* the oldest goes first */
  s->pending[s->npending++] = (pending_conn){.fd = fd, .deadline_ns = weft__deadline_after_ms(HELLO_DEADLINE_MS)};
}

/* Out of descriptors: shed the oldest pending connection; with none, give up the reserve
 * fd to accept and close the newcomer (so the backlog does not keep poll() returning at
 * once); without even that, stop accepting for EMFILE_PAUSE_MS. Never a busy loop. */
static void shed_for_descriptors(root_state *s) {
  if (s->npending > 0) {
    drop_pending(s, 0);
    return;
  }
  if (s->reserve_fd >= 0) {
    close(s->reserve_fd);
    int fd = accept(s->listen_fd, NULL, NULL);
    if (fd >= 0) close(fd);
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return;
  }
  s->accept_paused_until = weft__now_ns() + EMFILE_PAUSE_MS * 1000000ull;
}

/* Accepts what waits in the backlog (a bounded number per wake-up). */
static void accept_some(root_state *s) {
  for (int k = 0; k < 64; k++) {
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      weft__sock_set_nodelay(fd);
      add_pending(s, fd);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      shed_for_descriptors(s);
      if (s->accept_paused_until != 0) return;
      continue;
    }
    return; /* EAGAIN: the backlog is empty */
  }
}

/* Closes the pending connections whose hello did not come in time; returns the earliest
 * deadline of those left (UINT64_MAX: none). */
static uint64_t expire_pending(root_state *s, uint64_t now) {
  uint64_t next = UINT64_MAX;
  for (int i = 0; i < s->npending;) {
    if (s->pending[i].deadline_ns <= now) {
      drop_pending(s, i);
      continue;
    }
    if (s->pending[i].deadline_ns < next) next = s->pending[i].deadline_ns;
    i++;
  }
  return next;
}

static void finish_round(root_state *s) {
  for (int r = 0; r < s->nranks; r++)
    if (!slot(s, r)->has_blob) return; /* ready: every page exists */
  uint32_t each = slot(s, 0)->blob_len;
  for (int r = 1; r < s->nranks; r++)
    if (slot(s, r)->blob_len != each) {
      fail_all(s, r, "sent a bootstrap all-gather of a different size (internal error)");
      return;
    }
  char *all = malloc((size_t)each * (size_t)s->nranks + 1);
  if (all == NULL) {
    fail_all(s, -1, "(the bootstrap root) ran out of memory");
    return;
  }
  for (int r = 0; r < s->nranks; r++) {
    root_rank *x = slot(s, r);
    if (each > 0) memcpy(all + (size_t)r * each, x->blob, each);
    free(x->blob);
    x->blob = NULL;
    x->has_blob = 0;
  }
  for (int r = 0; r < s->nranks; r++)
    send_msg(slot(s, r)->fd, WEFT__BS_GATHERED, all, each * (uint32_t)s->nranks, NULL, 0);
  free(all);
}

/* The rank hosting this root said goodbye: the others must no longer read the root's end
 * closing (when that process exits) as that rank's failure. */
static void announce_host_left(root_state *s) {
  FOR_EACH_SLOT(s, r, x)
    if (x->state == SLOT_JOINED) send_msg(x->fd, WEFT__BS_HOST_LEFT, NULL, 0, NULL, 0);
}

static void on_rank_message(root_state *s, int rank) {
  root_rank *r = slot(s, rank);
  weft__bs_header hd;
  uint64_t dl = weft__deadline_after_ms(IO_DEADLINE_MS);
  if (weft__sock_recv_all(r->fd, &hd, sizeof(hd), dl) != 0) {
    fail_all(s, rank, "exited or closed its bootstrap connection without destroying its communicator");
    return;
  }
  if (hd.type == WEFT__BS_BYE) {
    r->state = SLOT_LEFT;
    if (rank == s->host_rank) announce_host_left(s); /* before the close its rank waits for */
    close_rank(r);
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
    if (state_of(s, r) == SLOT_EMPTY) n += snprintf(text + n, sizeof(text) - (size_t)n, " %d", r);
  WEFT_WARN("bootstrap root: %s", text);
  FOR_EACH_SLOT(s, r, x) {
    if (x->state == SLOT_JOINED) send_text(x->fd, WEFT__BS_REJECT, WEFT_ERR_TIMEOUT, text);
    close_rank(x);
  }
  s->done = 1;
}

/* The earliest deadline that matters now: before all joined, the first joined rank's. */
static uint64_t next_deadline(const root_state *s) {
  if (s->ready) return UINT64_MAX;
  if (s->nranks == 0 || s->conflict[0]) return s->idle_deadline_ns;
  return s->join_deadline_ns;
}

/* who[i]: -1 the listening socket, -2 - k pending connection k, else the rank. */
static int build_pollset(root_state *s, struct pollfd *p, int *who, uint64_t now) {
  int n = 0;
  if (s->listen_fd >= 0 && now >= s->accept_paused_until) {
    p[n] = (struct pollfd){s->listen_fd, POLLIN, 0};
    who[n++] = -1;
  }
  for (int i = 0; i < s->npending; i++) { p[n] = (struct pollfd){s->pending[i].fd, POLLIN, 0}; who[n++] = -2 - i; }
  FOR_EACH_SLOT(s, r, x)
    if (x->state == SLOT_JOINED) { p[n] = (struct pollfd){x->fd, POLLIN, 0}; who[n++] = r; }
  return n;
}

static void serve_once(root_state *s, struct pollfd *p, int *who) {
  uint64_t now = weft__now_ns();
  uint64_t dl = next_deadline(s), wake = expire_pending(s, now);
  if (dl < wake) wake = dl;
  if (s->accept_paused_until > now && s->accept_paused_until < wake) wake = s->accept_paused_until;
  int n = build_pollset(s, p, who, now);
  int ms = wake == UINT64_MAX ? 1000 : weft__ms_left(wake);
  int rc = poll(p, (nfds_t)n, ms);
  if (rc < 0 && errno != EINTR) { fail_all(s, -1, "(the bootstrap root) failed in poll"); return; }
  if (weft__now_ns() >= dl) {
    if (s->nranks == 0 || s->conflict[0]) s->done = 1; else time_out_join(s);
    return;
  }
  /* Pending connections are handled from the last to the first so that removing one does
   * not shift those still to be looked at; they come before the listener's new ones. */
  for (int i = n - 1; i >= 0 && !s->done; i--)
    if (who[i] <= -2 && (p[i].revents & (POLLIN | POLLHUP | POLLERR))) read_pending(s, -2 - who[i]);
  for (int i = 0; i < n && !s->done; i++) {
    if (who[i] <= -2 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (who[i] == -1) accept_some(s);
    else if (state_of(s, who[i]) == SLOT_JOINED) on_rank_message(s, who[i]);
  }
}

static void *root_main(void *arg) {
  root_state *s = arg;
  size_t cap = 0;
  struct pollfd *p = NULL;
  int *who = NULL;
  while (!s->done) {
    size_t need = 1 + MAX_PENDING + (size_t)s->njoined;
    if (need > cap) {
      struct pollfd *np = realloc(p, need * sizeof(*p));
      if (np != NULL) p = np;
      int *nw = realloc(who, need * sizeof(*who));
      if (nw != NULL) who = nw;
      if (np == NULL || nw == NULL) break;
      cap = need;
    }
    serve_once(s, p, who);
  }
  while (s->npending > 0) drop_pending(s, s->npending - 1);
  FOR_EACH_SLOT(s, r, x) close_rank(x);
  for (int i = 0; s->pages != NULL && i < (s->nranks + PAGE_RANKS - 1) / PAGE_RANKS; i++) free(s->pages[i]);
  if (s->listen_fd >= 0) close(s->listen_fd);
  if (s->reserve_fd >= 0) close(s->reserve_fd);
  free(s->pages);
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
  weft__sock_set_nonblock(s->listen_fd, 1); /* accept_some drains it without blocking */
  s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  s->host_rank = -1;
  s->join_deadline_ns = UINT64_MAX;
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
    if (s->reserve_fd >= 0) close(s->reserve_fd);
    free(s);
    return weft__error(NULL, WEFT_ERR_SYSTEM, "bootstrap root: cannot start thread: %s", strerror(rc));
  }
  return WEFT_SUCCESS;
}

/* connect.c: choosing a transport per pair of ranks and connecting them (the setup half of
 * transports/transport.h's contract).
 *
 * Choice: every registered transport is asked can_connect(system view, me, peer) and the
 * highest preference wins; WEFT_TRANSPORT=<name> forces one (auto: the default). Setup:
 * each transport listens with its peers (every rank calls every transport, maybe with no
 * peers), one bootstrap all-gather carries every transport's card, then each transport's
 * connect is called until it says done. The loop owns the deadline (the communicator's
 * timeout) and looks for failed ranks between calls, so no transport waits on its own.
 * WEFT_TRANSPORT_CAPS (a mask of WEFT__TRANSPORT_CAP_* bits, default all) hides
 * capabilities from the core: tests run with it 0 to show the core never assumes one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "lib/bootstrap.h"
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/status.h"
#include "topo/topo.h"
#include "transports/transport.h"

#define POLL_NS 100000 /* between connect passes that all waited: 0.1 ms */

_Static_assert((int)WEFT__COMM_TRANSPORTS == (int)WEFT__MAX_TRANSPORTS, "one state slot per transport");

/* WEFT_TRANSPORT's transport in *out; NULL for auto. Every rank must set the same (each
 * peer's value came in the init all-gather, weft__peer_info.transport): two ranks forcing
 * different transports would each wait for a connection the other never makes, until the
 * timeout. Errors: WEFT_ERR_INVALID_USAGE for an unknown name or a disagreement, naming
 * both ranks and values. */
static weft_status_t forced_transport(struct weft_comm *c, const weft__transport **out) {
  const char *t = weft__env_str("WEFT_TRANSPORT", "auto");
  *out = NULL;
  if (strcmp(t, "auto") != 0 && (*out = weft__transport_by_name(t)) == NULL)
    return weft__error(c, WEFT_ERR_INVALID_USAGE, "rank %d: WEFT_TRANSPORT=%s names no transport "
                       "(auto, or one of the built-in transports such as shm or socket)", c->rank, t);
  for (int p = 0; p < c->nranks; p++)
    if (strncmp(c->peers[p].transport, c->peers[c->rank].transport, sizeof(c->peers[p].transport)) != 0)
      return weft__error(c, WEFT_ERR_INVALID_USAGE, "rank %d: WEFT_TRANSPORT=%.16s here but %.16s on "
                         "peer %d: set it the same on every rank", c->rank, c->peers[c->rank].transport,
                         c->peers[p].transport, p);
  return WEFT_SUCCESS;
}

static int ntransports(void) {
  int n = 0;
  while (weft__transports[n] != NULL) n++;
  return n;
}

/* Picks conns[p].tr for every peer and lists each transport's peers: list[t * n ..]. */
static weft_status_t choose_all(struct weft_comm *c, int *list, int *count) {
  const weft__transport *forced;
  WEFT_TRY(forced_transport(c, &forced));
  c->forced_transport = forced;
  for (int p = 0; p < c->nranks; p++) {
    c->conns[p].peer = p;
    c->conns[p].call = &c->call;
    if (p == c->rank) continue;
    const weft__transport *tr = weft__transport_choose(c->topo, c->rank, p, forced);
    if (tr == NULL && forced != NULL)
      return weft__error(c, WEFT_ERR_INVALID_USAGE, "rank %d: WEFT_TRANSPORT=%s cannot reach peer %d (on host %s)",
                         c->rank, forced->name, p, c->peers[p].hostname);
    if (tr == NULL)
      return weft__error(c, WEFT_ERR_INVALID_USAGE, "rank %d: no transport can reach peer %d (on host %s)",
                         c->rank, p, c->peers[p].hostname);
    int t = weft__transport_index(tr);
    c->conns[p].tr = tr;
    list[t * c->nranks + count[t]++] = p;
  }
  return WEFT_SUCCESS;
}

/* The capabilities the core may use of each transport, and of every peer's. */
static void discover_caps(struct weft_comm *c) {
  unsigned mask = (unsigned)weft__env_long("WEFT_TRANSPORT_CAPS", WEFT__TRANSPORT_CAP_ALL);
  c->nbefore = c->nyielding = 0;
  c->before_min_bytes = SIZE_MAX;
  for (int t = 0; weft__transports[t] != NULL; t++) {
    const weft__transport *tr = weft__transports[t];
    c->transport_caps[t] = tr->caps & mask;
    if (c->transport_caps[t] & WEFT__TRANSPORT_CAP_PLACEMENT) {
      c->before[c->nbefore++] = tr->before_collective;
      if (tr->before_min_bytes < c->before_min_bytes) c->before_min_bytes = tr->before_min_bytes;
    }
    if ((c->transport_caps[t] & WEFT__TRANSPORT_CAP_WAIT) && tr->yielding != NULL)
      c->yielding[c->nyielding++] = tr->yielding;
  }
  c->caps_all = ~0u;
  for (int p = 0; p < c->nranks; p++) {
    weft__conn *conn = &c->conns[p];
    if (conn->tr == NULL) continue;
    conn->caps = c->transport_caps[weft__transport_index(conn->tr)];
    conn->slow = conn->tr->post != NULL || !(conn->caps & WEFT__TRANSPORT_CAP_RECV_REDUCE);
    conn->other_cpus = (conn->caps & WEFT__TRANSPORT_CAP_WAIT) && conn->tr->yielding != NULL &&
                       conn->tr->peer_on_cpu != NULL && c->topo != NULL &&
                       !weft__topo_cpusets_meet(c->topo->ranks[c->rank].cpuset, c->topo->ranks[p].cpuset);
    c->caps_all &= conn->caps;
  }
}

/* Every transport's listen; *first gets the first error (the cards still go out). */
static void listen_all(struct weft_comm *c, const int *list, const int *count, char *card,
                       weft_status_t *first) {
  for (int t = 0; weft__transports[t] != NULL; t++) {
    weft_status_t st = weft__transports[t]->listen(c, list + t * c->nranks, count[t], card);
    if (*first == WEFT_SUCCESS) *first = st;
    card += weft__transports[t]->card_bytes;
  }
}

/* Calls every transport's connect until all are done, a transport fails, a rank fails or
 * the deadline passes. cards: every rank's blob of cards, `blob` bytes each. */
static weft_status_t connect_all(struct weft_comm *c, const char *cards, size_t blob) {
  int n = ntransports(), done[WEFT__MAX_TRANSPORTS] = {0}, left = n;
  const void **mine = calloc((size_t)c->nranks, sizeof *mine);
  if (mine == NULL) return weft__error(c, WEFT_ERR_NO_MEMORY, "rank %d: init: out of memory", c->rank);
  uint64_t deadline = weft__deadline_after_ms(c->timeout_ms);
  weft_status_t st = WEFT_SUCCESS;
  char waiting[256] = "";
  size_t at = 0;
  for (int t = 0; t < n; t++) {
    for (int r = 0; r < c->nranks; r++) mine[r] = cards + (size_t)r * blob + at;
    at += weft__transports[t]->card_bytes;
  }
  for (;;) {
    at = 0;
    for (int t = 0; t < n && st == WEFT_SUCCESS; t++) {
      for (int r = 0; r < c->nranks; r++) mine[r] = cards + (size_t)r * blob + at;
      at += weft__transports[t]->card_bytes;
      if (done[t]) continue;
      char what[200] = "";
      st = weft__transports[t]->connect(c, mine, what, sizeof what);
      if (st == WEFT_SUCCESS) done[t] = 1, left--;
      else if (st == WEFT_IN_PROGRESS)
        st = WEFT_SUCCESS, snprintf(waiting, sizeof waiting, "%s setup: waiting for %s", weft__transports[t]->name, what);
    }
    if (st != WEFT_SUCCESS || left == 0) break;
    int failed = -2;
    const char *why = NULL;
    if (weft__bootstrap_check_failure(c, &failed, &why) != WEFT_SUCCESS) {
      st = weft__error(c, WEFT_ERR_REMOTE, "rank %d: %s: rank %d failed (%s)", c->rank, waiting, failed,
                       why ? why : "unknown");
      break;
    }
    if (weft__now_ns() >= deadline) {
      st = weft__error(c, WEFT_ERR_TIMEOUT, "rank %d: %s: timed out after %d ms", c->rank, waiting, c->timeout_ms);
      break;
    }
    struct timespec ts = {0, POLL_NS};
    nanosleep(&ts, NULL);
  }
  free(mine);
  return st;
}

/* "shm (recv-reduce inline peer-memory wait liveness placement nt-landing), socket (recv-reduce)":
 * the transports this rank uses and the capabilities the core may use of each. */
static void describe_caps(const struct weft_comm *c, const int *count, char *buf, size_t len) {
  static const char *const names[] = {"recv-reduce", "inline", "peer-memory", "wait", "liveness", "placement",
                                      "nt-landing"};
  size_t at = 0;
  buf[0] = '\0';
  for (int t = 0; weft__transports[t] != NULL && at < len; t++) {
    if (count[t] == 0) continue;
    at += (size_t)snprintf(buf + at, len - at, "%s%s (", at ? ", " : "", weft__transports[t]->name);
    for (int b = 0; b < (int)(sizeof names / sizeof names[0]) && at < len; b++)
      if (c->transport_caps[t] & (1u << b)) at += (size_t)snprintf(buf + at, len - at, "%s%s", buf[at - 1] == '(' ? "" : " ", names[b]);
    if (at < len) at += (size_t)snprintf(buf + at, len - at, ")");
  }
}

/* "2 shm peers, 1 socket peers", in registry order. */
static void describe_peers(const int *count, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int t = 0; weft__transports[t] != NULL && at < len; t++)
    at += (size_t)snprintf(buf + at, len - at, "%s%d %s peers", t ? ", " : "", count[t], weft__transports[t]->name);
}

weft_status_t weft__comm_connect(struct weft_comm *c) {
  int n = ntransports();
  size_t blob = 0;
  for (int t = 0; t < n; t++) blob += weft__transports[t]->card_bytes;
  int *list = calloc((size_t)c->nranks * (size_t)n + 1, sizeof(int));
  char *cards = calloc((size_t)c->nranks + 1, blob);
  c->conns = calloc((size_t)c->nranks, sizeof(weft__conn));
  weft_status_t st = WEFT_SUCCESS;
  int count[WEFT__MAX_TRANSPORTS] = {0};
  if (list == NULL || cards == NULL || c->conns == NULL)
    st = weft__error(c, WEFT_ERR_NO_MEMORY, "rank %d: init: out of memory", c->rank);
  if (st == WEFT_SUCCESS) st = choose_all(c, list, count);
  if (st == WEFT_SUCCESS) {
    weft_status_t local = WEFT_SUCCESS;
    char *me = cards + (size_t)c->nranks * blob; /* this rank's cards, gathered below */
    listen_all(c, list, count, me, &local);
    st = weft__bootstrap_allgather(c, me, blob, cards);
    if (st == WEFT_SUCCESS) st = local;
  }
  if (st == WEFT_SUCCESS) st = connect_all(c, cards, blob);
  free(list);
  free(cards);
  if (st != WEFT_SUCCESS) return st;
  discover_caps(c);
  char peers[256], caps[512];
  describe_peers(count, peers, sizeof peers);
  describe_caps(c, count, caps, sizeof caps);
  WEFT_INFO("rank %d of %d ready: %s", c->rank, c->nranks, peers);
  if (caps[0] != '\0') WEFT_INFO("rank %d: transports and the capabilities used: %s", c->rank, caps);
  return WEFT_SUCCESS;
}

void weft__comm_close_transports(struct weft_comm *c) {
  if (c->conns == NULL) return;
  for (int t = 0; weft__transports[t] != NULL; t++) weft__transports[t]->close(c);
}

/* agree.c: the survivors of a failure agree on the set of failed ranks (issue 22), as MPI
 * ULFM's MPI_Comm_agree / failure_ack do for a shrink: two survivors that saw different
 * failures must still build the same communicator, or fail alike.
 *
 * Flooding consensus with a perfect failure detector (Chandra and Toueg's model): a connect
 * to a rank's fault-tolerance listener that is refused means its process is gone. In each
 * round every survivor sends its current failed set to every rank it believes alive and
 * waits for theirs (or for their death); the union is its next set. A rank decides when a
 * round brought no change: every live rank sent exactly its set, and no new death was seen.
 * Since a rank sends one set to all in a round, two ranks that both finish a round without
 * change hold the same set. A rank that saw a death the deciders did not see goes on to the
 * next round, and adopts the decided set (DECIDED) instead: every rank that decides or adopts
 * a set sends it to every rank it counts alive before it returns (so one that dies halfway is
 * relayed, as a revoke is), and its watcher answers a later AGREE with it. That message
 * matters because the failure detector cannot tell a dead rank from one that decided and
 * left (its caller destroyed comm, or exited): both refuse connections. So a rank that sees a
 * death first reads every message that reached it before (weft__ft_sync), and adopts a
 * DECIDED found there rather than counting the decider failed, which would split the
 * survivors. That set may still name a dead rank as alive: the commit that ends the
 * new communicator's build (a second agreement) then drops it on every survivor alike, and
 * shrink agrees again (comm_shrink.c). Survivors may also raise flags (ft.h), ORed like the
 * ranks' bits: the commit learns that way whether any survivor's build failed.
 * Sets only grow, so there are at most nranks + 1 rounds. A live rank that sends nothing for
 * the communicator's timeout is counted as failed, so every wait has a deadline. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/ft.h"
#include "lib/log.h"
#include "lib/status.h"

#define SEND_DEADLINE_MS 1000
#define WAIT_SLICE_MS 20
#define PROBE_EVERY_NS 50000000ull /* how often a silent rank's liveness is checked */
#define PROBE_WAIT_MS 200
#define SYNC_WAIT_MS 1000 /* one loopback connect and the watcher's queue before it */

typedef struct {
  struct weft_comm *comm;
  uint32_t epoch;
  size_t mb;           /* mask bytes */
  uint8_t *set;        /* the set this round proposes */
  uint8_t *next;       /* the union seen so far this round */
  char *pending;       /* [nranks]: a live rank whose proposal this round has not come */
  int changed;         /* a proposal differed from set, or a death was seen */
  int death;           /* a death was seen this round */
} round_state;

/* A DECIDED from a rank that finished this epoch: adopt it. 1 when one was there. */
static int take_decided(round_state *s, uint8_t *mask, weft_status_t *st, int wait_ms) {
  weft__ft_msg *m = weft__ft_take(s->comm, WEFT__FT_DECIDED, s->epoch, ~0u, -1, wait_ms);
  if (m == NULL) return 0;
  if (m->len != s->mb) {
    free(m);
    return 0;
  }
  memcpy(mask, m->payload, s->mb);
  int from = m->from;
  free(m);
  struct weft_comm *comm = s->comm;
  weft__ft_set_decided(comm, s->epoch, mask);
  *st = weft__mask_has(mask, comm->rank)
            ? weft__error(comm, WEFT_ERR_REMOTE, "rank %d: shrink: the survivors (rank %d told this one) "
                          "counted this rank as failed and left it out", comm->rank, from)
            : WEFT_SUCCESS;
  return 1;
}

static void saw_death(round_state *s, int p, const char *how) {
  WEFT_INFO("rank %d: shrink agreement: rank %d %s", s->comm->rank, p, how);
  s->pending[p] = 0;
  weft__mask_set(s->next, p);
  s->changed = 1;
  s->death = 1;
}

/* Sends this round's set and collects the others' (or their deaths). */
static weft_status_t run_round(round_state *s, uint32_t round, uint8_t *mask, int *decided) {
  struct weft_comm *comm = s->comm;
  int *to = malloc(sizeof(int) * (size_t)comm->nranks), *res = malloc(sizeof(int) * (size_t)comm->nranks), n = 0;
  if (to == NULL || res == NULL) {
    free(to), free(res);
    return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: shrink agreement: out of memory", comm->rank);
  }
  memcpy(s->next, s->set, s->mb);
  s->changed = s->death = 0;
  for (int p = 0; p < comm->nranks; p++)
    if (p != comm->rank && !weft__mask_has(s->set, p)) to[n++] = p;
  weft__ft_send(comm, to, n, WEFT__FT_AGREE, s->epoch, round, s->set, (uint32_t)s->mb, res,
                weft__deadline_after_ms(SEND_DEADLINE_MS));
  int waiting = 0;
  for (int i = 0; i < n; i++) {
    s->pending[to[i]] = res[i] != 0;
    waiting += res[i] != 0;
    if (res[i] == 0) saw_death(s, to[i], "is gone (its listener refused)");
  }
  free(to), free(res);
  uint64_t last_news = weft__now_ns(), last_probe = last_news;
  weft_status_t st = WEFT_SUCCESS;
  while (waiting > 0) {
    if (take_decided(s, mask, &st, 0)) {
      *decided = 1;
      return st;
    }
    weft__ft_msg *m = weft__ft_take(comm, WEFT__FT_AGREE, s->epoch, round, -1, WAIT_SLICE_MS);
    uint64_t now = weft__now_ns();
    if (m != NULL) {
      if (s->pending[m->from] && m->len == s->mb) {
        s->pending[m->from] = 0;
        waiting--;
        last_news = now;
        if (memcmp(m->payload, s->set, s->mb) != 0) s->changed = 1;
        for (size_t i = 0; i < s->mb; i++) s->next[i] |= m->payload[i];
      }
      free(m);
      continue;
    }
    if (now - last_probe > PROBE_EVERY_NS) {
      last_probe = now;
      for (int p = 0; p < comm->nranks; p++)
        if (s->pending[p] && weft__ft_probe(comm, p, PROBE_WAIT_MS) == 0) saw_death(s, p, "is gone"), waiting--;
    }
    if (now - last_news > (uint64_t)comm->timeout_ms * 1000000ull) {
      for (int p = 0; p < comm->nranks; p++)
        if (s->pending[p]) {
          WEFT_WARN("rank %d: shrink agreement: rank %d is alive but sent nothing for %d ms: counted as failed",
                    comm->rank, p, comm->timeout_ms);
          saw_death(s, p, "is silent");
          waiting--;
        }
    }
  }
  /* A "death" may be a rank that decided and left: its DECIDED came before its refusal. */
  if (s->death) {
    if (!weft__ft_sync(comm, SYNC_WAIT_MS))
      WEFT_WARN("rank %d: shrink agreement: could not read this rank's own fault-tolerance inbox in %d ms",
                comm->rank, SYNC_WAIT_MS);
    if (take_decided(s, mask, &st, 0)) {
      *decided = 1;
      return st;
    }
  }
  /* Our own view changed too when next gained a rank beyond every proposal (a death). */
  if (memcmp(s->next, s->set, s->mb) != 0) s->changed = 1;
  return WEFT_SUCCESS;
}

weft_status_t weft__agree_failed(struct weft_comm *comm, uint32_t epoch, uint8_t *mask) {
  round_state s = {comm, epoch, weft__agree_mask_bytes(comm->nranks), NULL, NULL, NULL, 0, 0};
  s.set = malloc(s.mb);
  s.next = malloc(s.mb);
  s.pending = calloc((size_t)comm->nranks, 1);
  weft_status_t st = WEFT_SUCCESS;
  if (s.set == NULL || s.next == NULL || s.pending == NULL)
    st = weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: shrink agreement: out of memory", comm->rank);
  int done = 0;
  if (st == WEFT_SUCCESS) memcpy(s.set, mask, s.mb);
  for (uint32_t round = 0; st == WEFT_SUCCESS && !done && round <= (uint32_t)comm->nranks + 1; round++) {
    int decided = 0;
    st = run_round(&s, round, mask, &decided);
    if (st != WEFT_SUCCESS || decided) {
      done = 1;
      break;
    }
    if (!s.changed) { /* a quiet round: decide */
      memcpy(mask, s.set, s.mb);
      weft__ft_set_decided(comm, epoch, mask);
      done = 1;
      break;
    }
    memcpy(s.set, s.next, s.mb);
  }
  if (st == WEFT_SUCCESS && !done)
    st = weft__error(comm, WEFT_ERR_INTERNAL, "rank %d: shrink agreement: no decision after %d rounds",
                     comm->rank, comm->nranks + 2);
  free(s.set), free(s.next), free(s.pending);
  return st;
}

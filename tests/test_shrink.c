/* test_shrink.c: weft_comm_revoke and weft_comm_shrink (issue 22) on real rank processes:
 * a revoke reaching ranks blocked in a call (timed), NCCL's explicit exclude list, and
 * WEFT_SHRINK_FAILED after a SIGKILL of a non-zero rank and of rank 0 (whose process hosts
 * the bootstrap root in these runs), on shm, socket and two emulated hosts, with a second
 * rank dying while the survivors shrink, and with a member dying midway through the build
 * of the new communicator (every survivor must end alike), and with a survivor that decided
 * the agreement leaving at once (the others must adopt its decision, not count it failed).
 * Every new communicator is checked: its size, which old rank each new rank is (old order
 * kept), and exact all-reduce and all-gather results. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/ft.h"
#include "tests/harness.h"

#define TIMEOUT_MS 15000      /* the communicators' deadline: a revoke must beat it by far */
#define PROMPT_MS 3000        /* "promptly": well under the deadline even on a loaded machine */
#define ID_FLAG 63            /* shared->flags: rank 0's unique id is in shared->values[0..16) */

/* Init with the bootstrap root in rank 0's process (not the test's parent), so that killing
 * rank 0 kills the root too. hosts: emulated host letters per rank, or NULL. */
static int init_root_in_rank0(harness_rank *r, const char *hosts) {
  if (r->rank == 0) {
    if (!harness_expect_status(r, weft_get_unique_id(&r->id), WEFT_SUCCESS, "rank 0's unique id")) return 1;
    memcpy((void *)r->shared->values, &r->id, sizeof(r->id));
    atomic_store(&r->shared->flags[ID_FLAG], 1);
  } else {
    if (!harness_wait_flag(r, ID_FLAG, 1, 10000)) return harness_fail(r, "no unique id from rank 0"), 1;
    memcpy(&r->id, (void *)r->shared->values, sizeof(r->id));
  }
  if (hosts != NULL) return harness_init_on_emulated_host(r, hosts);
  weft_status_t st = weft_comm_init_rank_config(&r->comm, r->nranks, r->id, r->rank, &r->config);
  if (st != WEFT_SUCCESS) r->comm = NULL;
  return harness_expect_status(r, st, WEFT_SUCCESS, "init") ? 0 : 1;
}

/* The new communicator holds exactly the old ranks `members` (ascending): size, order, sums. */
static void check_new(harness_rank *r, weft_comm_t c, const int *members, int n, const char *what) {
  int size = -1, rank = -1;
  weft_comm_count(c, &size);
  weft_comm_user_rank(c, &rank);
  int want = 0;
  while (want < n && members[want] != r->rank) want++;
  if (size != n || rank != want) {
    harness_fail(r, "%s: new size %d rank %d, want %d and %d", what, size, rank, n, want);
    return;
  }
  int32_t mine = r->rank, all[HARNESS_MAX_RANKS];
  if (!harness_expect_status(r, weft_all_gather(&mine, all, 1, WEFT_INT32, c, NULL), WEFT_SUCCESS, what)) return;
  for (int i = 0; i < n; i++)
    if (all[i] != members[i]) harness_fail(r, "%s: new rank %d is old rank %d, want %d", what, i, all[i], members[i]);
  enum { COUNT = 10000 };
  int64_t *v = malloc(COUNT * sizeof(*v));
  for (int i = 0; i < COUNT; i++) v[i] = (int64_t)(r->rank + 1) * (i + 1);
  int64_t wsum = 0;
  for (int i = 0; i < n; i++) wsum += members[i] + 1;
  if (harness_expect_status(r, weft_all_reduce(v, v, COUNT, WEFT_INT64, WEFT_SUM, c, NULL), WEFT_SUCCESS, what))
    for (int i = 0; i < COUNT; i++)
      if (v[i] != wsum * (i + 1)) {
        harness_fail(r, "%s: all_reduce element %d: %lld, want %lld", what, i, (long long)v[i], (long long)(wsum * (i + 1)));
        break;
      }
  free(v);
}

/* ---- revoke while the others are blocked ------------------------------------------------ */

/* Ranks 1.. enter an all_reduce that rank 0 never joins; rank 0 revokes. Each blocked rank
 * must return WEFT_ERR_REVOKED within PROMPT_MS of the revoke (the deadline is TIMEOUT_MS),
 * later calls too; then an explicit shrink excluding nobody rebuilds all ranks. */
static int revoke_body(harness_rank *r) {
  if (r->rank == 0) {
    for (int p = 1; p < r->nranks; p++) harness_wait_flag(r, p, 1, 10000);
    harness_sleep_ms(200); /* they are inside the call now */
    r->shared->values[63] = (long long)(harness_now_ms() * 1000.0);
    harness_expect_status(r, weft_comm_revoke(r->comm), WEFT_SUCCESS, "revoke");
  } else {
    float x[1024] = {0};
    atomic_store(&r->shared->flags[r->rank], 1);
    weft_status_t st = weft_all_reduce(x, x, 1024, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL);
    double now = harness_now_ms(), at = (double)r->shared->values[63] / 1000.0;
    if (harness_expect_status(r, st, WEFT_ERR_REVOKED, "all_reduce blocked when rank 0 revoked")) {
      harness_note(r, "returned WEFT_ERR_REVOKED %.1f ms after rank 0's revoke", now - at);
      if (now - at > PROMPT_MS) harness_fail(r, "revoke took %.0f ms to reach this rank (limit %d)", now - at, PROMPT_MS);
      if (!harness_names_rank(weft_get_last_error(r->comm), 0))
        harness_fail(r, "the message does not name rank 0: \"%s\"", weft_get_last_error(r->comm));
    }
  }
  float y = 1;
  harness_expect_status(r, weft_all_reduce(&y, &y, 1, WEFT_FLOAT32, WEFT_SUM, r->comm, NULL), WEFT_ERR_REVOKED,
                        "a call after the revoke");
  weft_comm_t next = NULL;
  if (harness_expect_status(r, weft_comm_shrink(r->comm, NULL, 0, &next, NULL), WEFT_SUCCESS, "shrink excluding none")) {
    int all[HARNESS_MAX_RANKS];
    for (int i = 0; i < r->nranks; i++) all[i] = i;
    check_new(r, next, all, r->nranks, "after revoke");
    weft_comm_destroy(next);
  }
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

/* ---- NCCL's explicit exclude list -------------------------------------------------------- */

static int exclude_body(harness_rank *r) {
  int ex[2] = {1, r->nranks - 2}, nex = r->nranks > 3 ? 2 : 1, members[HARNESS_MAX_RANKS], n = 0;
  for (int p = 0; p < r->nranks; p++)
    if (p != ex[0] && (nex < 2 || p != ex[1])) members[n++] = p;
  if (r->rank == ex[0] || (nex == 2 && r->rank == ex[1])) {
    harness_wait_flag(r, 0, 1, 20000); /* stays alive until the others are done */
    return r->failures;
  }
  weft_comm_t next = NULL;
  if (harness_expect_status(r, weft_comm_shrink(r->comm, ex, nex, &next, NULL), WEFT_SUCCESS, "shrink")) {
    check_new(r, next, members, n, "explicit exclude");
    weft_comm_destroy(next);
  }
  /* The excluded ranks stay alive until every member is done with the new communicator. */
  if (r->rank == members[0]) atomic_store(&r->shared->flags[0], 1);
  else harness_wait_flag(r, 0, 1, 20000);
  return r->failures;
}

/* A member of the new communicator dies before it joins it: the last rank never calls
 * shrink and SIGKILLs itself 300 ms in. The others' shrink (explicit, excluding nobody) must
 * fail promptly and alike on every one of them, not wait for it until the deadline. */
static int member_dies_body(harness_rank *r) {
  if (r->rank == r->nranks - 1) {
    harness_sleep_ms(300);
    kill(getpid(), SIGKILL);
  }
  weft_comm_t next = NULL;
  double t0 = harness_now_ms();
  weft_status_t st = weft_comm_shrink(r->comm, NULL, 0, &next, NULL);
  double ms = harness_now_ms() - t0;
  if (st == WEFT_SUCCESS) return harness_fail(r, "shrink succeeded with rank %d dead", r->nranks - 1);
  if (st != WEFT_ERR_REMOTE) harness_fail(r, "shrink returned %s, want WEFT_ERR_REMOTE: \"%s\"", harness_status_name(st),
                                          weft_get_last_error(NULL));
  if (next != NULL) harness_fail(r, "newcomm not NULL after a failed shrink");
  harness_note(r, "shrink failed after %.0f ms (rank %d died at ~300 ms)", ms, r->nranks - 1);
  if (ms > PROMPT_MS + 300) harness_fail(r, "shrink took %.0f ms to fail (deadline %d)", ms, TIMEOUT_MS);
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

/* ---- a member dies while the new communicator is built ---------------------------------- */

/* Each member's init of the new communicator ends on its own; a member that dies midway
 * can leave some members with it built and the others failing. Made certain here: the
 * victim (the last rank) stalls before its second shm setup answer (the message carrying
 * its segment, which a peer needs to finish), so one member finishes its init, then dies
 * 300 ms later; the others never get its segment. sendmsg is interposed at link time
 * (libweft's calls resolve to this definition) and acts only in the victim's process. */
static int stall_at_answer; /* > 0: stall before this rank's answer number N, then die */
static int answers_sent;

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
  if (stall_at_answer > 0 && msg->msg_controllen > 0 && ++answers_sent == stall_at_answer) {
    harness_sleep_ms(300);
    kill(getpid(), SIGKILL);
  }
  return syscall(SYS_sendmsg, fd, msg, flags);
}

/* r->arg: the shrink's n (0: NCCL's explicit list, excluding nobody; WEFT_SHRINK_FAILED).
 * The survivors must end alike: explicit, all WEFT_ERR_REMOTE naming the victim; FAILED,
 * all holding the same communicator of the survivors (checked by check_new). */
static int dies_while_built_body(harness_rank *r) {
  int victim = r->nranks - 1, n = *(const int *)r->arg;
  if (r->rank == victim) stall_at_answer = 2;
  weft_comm_t next = NULL;
  weft_status_t st = weft_comm_shrink(r->comm, NULL, n, &next, NULL);
  if (r->rank == victim) harness_sleep_ms(10000); /* dies meanwhile */
  int size = 0;
  if (st == WEFT_SUCCESS) weft_comm_count(next, &size);
  harness_note(r, "shrink: %s, size %d", harness_status_name(st), size);
  r->shared->values[r->rank] = st == WEFT_SUCCESS ? size : -1;
  atomic_store(&r->shared->flags[r->rank], 1);
  for (int p = 0; p < victim; p++)
    if (!harness_wait_flag(r, p, 1, 20000)) harness_fail(r, "rank %d never returned from shrink", p);
    else if (r->shared->values[p] != r->shared->values[r->rank])
      harness_fail(r, "the survivors ended differently: this rank %s, rank %d %s", harness_status_name(st), p,
                   r->shared->values[p] >= 0 ? "kept a new communicator" : "failed");
  if (n == WEFT_SHRINK_FAILED && harness_expect_status(r, st, WEFT_SUCCESS, "shrink of the failed")) {
    int members[HARNESS_MAX_RANKS];
    for (int p = 0; p < victim; p++) members[p] = p;
    check_new(r, next, members, victim, "after the victim died mid-build");
  }
  if (n >= 0 && harness_expect_status(r, st, WEFT_ERR_REMOTE, "explicit shrink with the victim dead mid-build") &&
      !harness_names_rank(weft_get_last_error(NULL), victim))
    harness_fail(r, "the error does not name rank %d: \"%s\"", victim, weft_get_last_error(NULL));
  if (next != NULL) weft_comm_abort(next);
  weft_comm_abort(r->comm);
  r->comm = NULL;
  return r->failures;
}

static void run_dies_while_built(void **state) {
  const void **p = (const void **)*state;
  harness_opts o = {0};
  o.nranks = (int)(intptr_t)p[0];
  o.transport = p[1];
  o.timeout_ms = TIMEOUT_MS;
  o.deadline_s = 60;
  o.may_be_killed = 1u << (o.nranks - 1);
  harness_run(&o, dies_while_built_body, (void *)p[2]);
}

/* ---- a rank that decided the agreement leaves at once ---------------------------------- */

/* The victim SIGKILLs itself when its agreement proposal has gone to one survivor and not yet
 * to the other: send() is interposed at link time like sendmsg above, and acts only in the
 * victim's process, on its second AGREE. The survivor that got the proposal decides at once
 * and leaves (aborts comm: its listener closes, so it refuses connections as a dead rank
 * does); the other sees the victim's death, goes on to another round, and must adopt the
 * leaver's decision rather than count the leaver as failed. */
static int die_at_agree_send; /* > 0: SIGKILL this process before its AGREE number N */
static int agree_sends;

ssize_t send(int fd, const void *buf, size_t len, int flags) {
  uint32_t hdr[6];
  if (die_at_agree_send > 0 && len >= sizeof(hdr)) {
    memcpy(hdr, buf, sizeof(hdr));
    if (hdr[0] == 0x54465746u /* ft_channel.c's FT_MAGIC */ && hdr[5] == WEFT__FT_AGREE &&
        ++agree_sends == die_at_agree_send)
      kill(getpid(), SIGKILL);
  }
  return syscall(SYS_sendto, fd, buf, len, flags, NULL, 0);
}

/* With slow_accept_ms > 0 (set in rank 1's process), that rank's watcher takes each
 * connection late (accept4 interposed like send), so the leaver's DECIDED still waits in the
 * kernel's queue when rank 1 probes the leaver and finds it refusing: rank 1 must read its
 * queue before it believes that death (weft__ft_sync). */
static int slow_accept_ms;

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
  if (slow_accept_ms > 0) harness_sleep_ms(slow_accept_ms);
  return (int)syscall(SYS_accept4, fd, addr, len, flags);
}

static int decider_leaves_body(harness_rank *r) {
  int victim = r->nranks - 1;
  /* Every rank past its init before the victim may die (flag 1): a rank can return from
   * weft_comm_init while the others still exchange their shm segments, and the victim's death
   * then failed their init instead of the agreement (CI, 2026-11-30: ranks 0 and 1 got
   * WEFT_ERR_REMOTE from init 7 ms in, "segments of peers 1: rank 2 failed"). */
  atomic_store(&r->shared->flags[r->rank], 1);
  for (int p = 0; p < r->nranks; p++)
    if (!harness_wait_flag(r, p, 1, 20000)) return harness_fail(r, "rank %d never finished its init", p);
  if (r->rank == victim) die_at_agree_send = 2;
  if (r->rank == 1 && r->arg != NULL) slow_accept_ms = 100;
  size_t mb = weft__agree_mask_bytes(r->nranks);
  uint8_t mask[8] = {0};
  weft_status_t st = weft__agree_failed(r->comm, weft__ft_next_epoch(r->comm), mask);
  weft_comm_abort(r->comm); /* leaves at once, as a caller done with comm does */
  r->comm = NULL;
  if (r->rank == victim) return harness_fail(r, "the victim returned from the agreement alive");
  if (!harness_expect_status(r, st, WEFT_SUCCESS, "the agreement")) return r->failures;
  long long bits = 0;
  for (size_t i = 0; i < mb; i++) bits |= (long long)mask[i] << (8 * i);
  harness_note(r, "decided failed set 0x%llx", bits);
  for (int p = 0; p < victim; p++)
    if (weft__mask_has(mask, p)) harness_fail(r, "decided that rank %d, a survivor, failed", p);
  r->shared->values[r->rank] = bits;
  atomic_store(&r->shared->flags[r->rank], 2);
  for (int p = 0; p < victim; p++)
    if (!harness_wait_flag(r, p, 2, 20000)) harness_fail(r, "rank %d never returned from the agreement", p);
    else if (r->shared->values[p] != bits)
      harness_fail(r, "rank %d decided the failed set 0x%llx, this rank 0x%llx", p,
                   (long long)r->shared->values[p], bits);
  return r->failures;
}

/* ---- SIGKILL, then WEFT_SHRINK_FAILED ---------------------------------------------------- */

typedef struct {
  int victim, second;   /* second: a rank that dies while the others shrink, or -1 */
  const char *hosts;    /* emulated hosts, or NULL */
} kill_params;

static void *die_soon(void *arg) {
  harness_sleep_ms(*(int *)arg);
  kill(getpid(), SIGKILL);
  return NULL;
}

/* Everyone runs all_reduces; the victim SIGKILLs itself at a random step. Survivors see an
 * error, shrink with WEFT_SHRINK_FAILED; the second victim, if any, dies a random few ms into
 * its shrink. A survivor whose new communicator still held the second victim (it died after
 * the build) sees the next call fail and shrinks again. In the end every survivor holds the
 * same communicator of exactly the ranks alive, and its all-reduce is exact. */
static int kill_body(harness_rank *r) {
  const kill_params *kp = r->arg;
  if (init_root_in_rank0(r, kp->hosts)) return r->failures;
  srand((unsigned)time(NULL) ^ (unsigned)getpid());
  int kill_step = 3 + rand() % 20;
  if (r->rank == kp->victim) harness_note(r, "dies by SIGKILL before step %d", kill_step);
  weft_comm_t c = r->comm;
  double t_fail = 0;
  for (int step = 0;; step++) {
    if (r->rank == kp->victim && step == kill_step) kill(getpid(), SIGKILL);
    double x = r->rank + 1;
    weft_status_t st = weft_all_reduce(&x, &x, 1, WEFT_FLOAT64, WEFT_SUM, c, NULL);
    if (st != WEFT_SUCCESS) {
      t_fail = harness_now_ms();
      if (st != WEFT_ERR_REMOTE && st != WEFT_ERR_REVOKED && st != WEFT_ERR_TIMEOUT)
        harness_fail(r, "step %d: %s: \"%s\"", step, harness_status_name(st), weft_get_last_error(c));
      break;
    }
    if (step > 1000) return harness_fail(r, "the victim never died");
  }
  int members[HARNESS_MAX_RANKS], n = 0;
  for (int p = 0; p < r->nranks; p++)
    if (p != kp->victim && p != kp->second) members[n++] = p;
  if (r->rank == kp->second) {
    static int delay;
    delay = rand() % 40;
    pthread_t th;
    pthread_create(&th, NULL, die_soon, &delay);
  }
  for (int attempt = 0; attempt < 4; attempt++) {
    weft_comm_t next = NULL;
    weft_status_t st = weft_comm_shrink(c, NULL, WEFT_SHRINK_FAILED, &next, NULL);
    if (!harness_expect_status(r, st, WEFT_SUCCESS, "shrink of the failed")) break;
    if (attempt == 0) harness_note(r, "shrink took %.1f ms after the failed call", harness_now_ms() - t_fail);
    weft_comm_abort(c);
    c = next;
    int size = 0;
    weft_comm_count(c, &size);
    if (size == n || r->rank == kp->second) break;
    /* The second victim was still in: it is dead by now or soon; the next call says so. */
    harness_sleep_ms(100);
    double x = 1;
    st = weft_all_reduce(&x, &x, 1, WEFT_FLOAT64, WEFT_SUM, c, NULL);
    if (st == WEFT_SUCCESS) {
      harness_fail(r, "new size %d with rank %d in it, and it still answers", size, kp->second);
      break;
    }
  }
  if (r->rank == kp->second) harness_sleep_ms(5000); /* dies meanwhile */
  check_new(r, c, members, n, "after the kill");
  r->comm = c;
  return r->failures;
}

static void run_kill(void **state) {
  const void **p = (const void **)*state;
  harness_opts o = {0};
  o.nranks = (int)(intptr_t)p[0];
  o.transport = strcmp(p[1], "auto") != 0 ? p[1] : NULL;
  o.timeout_ms = TIMEOUT_MS;
  o.no_init = 1;
  o.deadline_s = 90;
  const kill_params *kp = p[2];
  o.may_be_killed = 1u << kp->victim | (kp->second >= 0 ? 1u << kp->second : 0);
  harness_run(&o, kill_body, (void *)kp);
}

static void run_plain(void **state) {
  const void **p = (const void **)*state;
  harness_opts o = {0};
  harness_body_fn body = (harness_body_fn)p[2];
  o.may_be_killed = body == member_dies_body ? 1u << ((int)(intptr_t)p[0] - 1) : 0;
  o.nranks = (int)(intptr_t)p[0];
  o.transport = p[1];
  o.timeout_ms = TIMEOUT_MS;
  o.deadline_s = 60;
  harness_run(&o, body, NULL);
}

static void run_decider_leaves(void **state) {
  const void **p = (const void **)*state;
  harness_opts o = {0};
  o.nranks = (int)(intptr_t)p[0];
  o.transport = p[1];
  o.timeout_ms = TIMEOUT_MS;
  o.deadline_s = 60;
  o.may_be_killed = 1u << (o.nranks - 1);
  harness_run(&o, decider_leaves_body, (void *)p[2]);
}

static const kill_params kill2 = {2, -1, NULL}, kill0 = {0, -1, NULL}, kill3_hosts = {3, -1, "AABB"},
                         kill0_hosts = {0, -1, "AABB"}, kill1_then3 = {1, 3, NULL};
static const int explicit_none = 0, failed_mode = WEFT_SHRINK_FAILED;

#define T(name, n, tr, fn, arg) {name "_" #n "_ranks_" tr, fn, NULL, NULL, (void *)(const void *[]){(void *)(intptr_t)n, tr, arg}}

int main(void) {
  const struct CMUnitTest tests[] = {
      T("revoke_wakes_blocked_ranks", 4, "shm", run_plain, (void *)revoke_body),
      T("revoke_wakes_blocked_ranks", 3, "socket", run_plain, (void *)revoke_body),
      T("explicit_exclude_list", 5, "shm", run_plain, (void *)exclude_body),
      T("explicit_exclude_list", 3, "socket", run_plain, (void *)exclude_body),
      T("member_dies_before_joining_fails_promptly", 4, "shm", run_plain, (void *)member_dies_body),
      T("member_dies_before_joining_fails_promptly", 3, "socket", run_plain, (void *)member_dies_body),
      T("sigkill_rank2_then_shrink_failed", 4, "shm", run_kill, &kill2),
      T("sigkill_rank2_then_shrink_failed", 4, "socket", run_kill, &kill2),
      T("sigkill_rank0_root_host_then_shrink_failed", 4, "shm", run_kill, &kill0),
      T("sigkill_rank0_root_host_then_shrink_failed", 4, "socket", run_kill, &kill0),
      T("sigkill_rank3_two_emulated_hosts", 4, "auto", run_kill, &kill3_hosts),
      T("sigkill_rank0_two_emulated_hosts", 4, "auto", run_kill, &kill0_hosts),
      T("second_rank_dies_during_shrink", 5, "shm", run_kill, &kill1_then3),
      T("member_dies_mid_build_explicit_all_fail", 4, "shm", run_dies_while_built, &explicit_none),
      T("agreement_decider_leaves_at_once", 3, "shm", run_decider_leaves, NULL),
      T("agreement_decider_leaves_before_its_decision_is_read", 3, "shm", run_decider_leaves, "slow watcher"),
      T("member_dies_mid_build_shrink_failed_agrees_again", 4, "shm", run_dies_while_built, &failed_mode),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}

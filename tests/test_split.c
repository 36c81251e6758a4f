/* test_split.c: weft_comm_split on real rank processes, over shm and socket.
 *
 * Each body splits the harness's communicator and checks, on every rank: the child's size
 * and this rank's place in it (members ordered by key, ties by parent rank), that the
 * child's ranks are who they should be (an all-gather of every member's parent rank in the
 * child), and that collectives on the child stay inside it (an all-reduce of parent ranks
 * equals the sum over the color's members only; a broadcast from the child's last rank).
 * Cases: colors rank % 3, keys reversing the order, equal keys, WEFT_SPLIT_NOCOLOR ranks
 * (NULL child), a child split again (nested), several children alive at once, and a bad
 * color on one rank failing on every rank with a message naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/harness.h"

typedef int (*color_fn)(int rank, int nranks);
typedef int (*key_fn)(int rank, int nranks);

/* The parent ranks of color in child order (key, then parent rank); returns their count. */
static int expected_members(int nranks, int color, color_fn colors, key_fn keys, int *out) {
  int n = 0;
  for (int p = 0; p < nranks; p++)
    if (colors(p, nranks) == color) out[n++] = p;
  for (int i = 1; i < n; i++) /* insertion sort by (key, parent rank) */
    for (int j = i; j > 0 && keys(out[j - 1], nranks) > keys(out[j], nranks); j--) {
      int t = out[j];
      out[j] = out[j - 1], out[j - 1] = t;
    }
  return n;
}

/* Checks child (of parent rank `me`) against the members list: size, rank, who is where,
 * and that an all-reduce and a broadcast reach exactly the members. */
static void check_child(harness_rank *r, weft_comm_t child, int me, const int *members, int n,
                        const char *what) {
  int size = -1, rank = -1;
  weft_comm_count(child, &size);
  weft_comm_user_rank(child, &rank);
  int want_rank = 0;
  while (want_rank < n && members[want_rank] != me) want_rank++;
  if (size != n || rank != want_rank) {
    harness_fail(r, "%s: child size %d rank %d, want %d and %d", what, size, rank, n, want_rank);
    return;
  }
  int32_t mine = me, all[HARNESS_MAX_RANKS];
  if (!harness_expect_status(r, weft_all_gather(&mine, all, 1, WEFT_INT32, child, NULL), WEFT_SUCCESS, what)) return;
  for (int i = 0; i < n; i++)
    if (all[i] != members[i]) harness_fail(r, "%s: child rank %d is parent rank %d, want %d", what, i, all[i], members[i]);
  int64_t sum = me, want_sum = 0;
  for (int i = 0; i < n; i++) want_sum += members[i];
  harness_expect_status(r, weft_all_reduce(&sum, &sum, 1, WEFT_INT64, WEFT_SUM, child, NULL), WEFT_SUCCESS, what);
  if (sum != want_sum) harness_fail(r, "%s: all_reduce of parent ranks %lld, want %lld", what, (long long)sum, (long long)want_sum);
  double b = rank == n - 1 ? 1000.0 + me : -1.0;
  harness_expect_status(r, weft_broadcast(&b, &b, 1, WEFT_FLOAT64, n - 1, child, NULL), WEFT_SUCCESS, what);
  if (b != 1000.0 + members[n - 1]) harness_fail(r, "%s: broadcast from child rank %d gave %g", what, n - 1, b);
}

/* Splits r->comm with colors/keys and checks the child; the child is destroyed unless kept. */
static weft_comm_t split_and_check(harness_rank *r, weft_comm_t parent, int me, int nranks,
                                   color_fn colors, key_fn keys, const char *what, int keep) {
  weft_comm_t child = (weft_comm_t)(uintptr_t)1; /* must become NULL for NOCOLOR */
  int color = colors(me, nranks);
  weft_status_t st = weft_comm_split(parent, color, keys(me, nranks), &child, NULL);
  if (!harness_expect_status(r, st, WEFT_SUCCESS, what)) return NULL;
  if (color == WEFT_SPLIT_NOCOLOR) {
    if (child != NULL) harness_fail(r, "%s: NOCOLOR rank got a communicator", what);
    return NULL;
  }
  int members[HARNESS_MAX_RANKS];
  int n = expected_members(nranks, color, colors, keys, members);
  if (child == NULL) return (void)harness_fail(r, "%s: no child communicator", what), NULL;
  check_child(r, child, me, members, n, what);
  if (keep) return child;
  harness_expect_status(r, weft_comm_destroy(child), WEFT_SUCCESS, what);
  return NULL;
}

static int mod3(int rank, int n) { return rank % 3; }
static int by_rank(int rank, int n) { return rank; }
static int reversed(int rank, int n) { return n - rank; }
static int same_key(int rank, int n) { return 7; }
static int one_color(int rank, int n) { return 5; }
static int none_for_0_and_last(int rank, int n) { return rank == 0 || rank == n - 1 ? WEFT_SPLIT_NOCOLOR : rank % 2; }
static int halves(int rank, int n) { return rank < n / 2 ? 0 : 1; }

static int colors_mod3_body(harness_rank *r) {
  split_and_check(r, r->comm, r->rank, r->nranks, mod3, by_rank, "colors rank%3", 0);
  return r->failures;
}

static int keys_reverse_body(harness_rank *r) {
  split_and_check(r, r->comm, r->rank, r->nranks, one_color, reversed, "one color, keys n-rank", 0);
  split_and_check(r, r->comm, r->rank, r->nranks, mod3, reversed, "colors rank%3, keys n-rank", 0);
  split_and_check(r, r->comm, r->rank, r->nranks, halves, same_key, "equal keys", 0);
  return r->failures;
}

static int nocolor_body(harness_rank *r) {
  split_and_check(r, r->comm, r->rank, r->nranks, none_for_0_and_last, reversed, "NOCOLOR ranks", 0);
  /* The parent still works after the split, on every rank. */
  int64_t v = 1;
  harness_expect_status(r, weft_all_reduce(&v, &v, 1, WEFT_INT64, WEFT_SUM, r->comm, NULL), WEFT_SUCCESS, "parent after split");
  if (v != r->nranks) harness_fail(r, "parent all_reduce after split gave %lld", (long long)v);
  return r->failures;
}

/* Halves, then each half split by rank parity inside it: the grandchild's members are the
 * parent ranks of the same half and parity. Both children stay alive while the grandchild is
 * made and used. */
static int nested_body(harness_rank *r) {
  weft_comm_t half = split_and_check(r, r->comm, r->rank, r->nranks, halves, by_rank, "halves", 1);
  if (half == NULL) return r->failures;
  int hr = -1, hn = -1;
  weft_comm_user_rank(half, &hr);
  weft_comm_count(half, &hn);
  weft_comm_t quarter = NULL;
  if (!harness_expect_status(r, weft_comm_split(half, hr % 2, -hr, &quarter, NULL), WEFT_SUCCESS, "nested split"))
    return r->failures;
  int members[HARNESS_MAX_RANKS], n = 0;
  for (int p = r->nranks - 1; p >= 0; p--) /* keys -child rank: highest parent rank first */
    if (halves(p, r->nranks) == halves(r->rank, r->nranks) && (p - (p < r->nranks / 2 ? 0 : r->nranks / 2)) % 2 == hr % 2)
      members[n++] = p;
  check_child(r, quarter, r->rank, members, n, "nested split");
  harness_expect_status(r, weft_comm_destroy(quarter), WEFT_SUCCESS, "destroy grandchild");
  harness_expect_status(r, weft_comm_destroy(half), WEFT_SUCCESS, "destroy child");
  return r->failures;
}

static int bad_color_body(harness_rank *r) {
  weft_comm_t child = NULL;
  int color = r->rank == r->nranks - 1 ? -5 : 0;
  weft_status_t st = weft_comm_split(r->comm, color, 0, &child, NULL);
  harness_expect_status(r, st, WEFT_ERR_INVALID_ARGUMENT, "split with color -5 on the last rank");
  if (child != NULL) harness_fail(r, "bad split left a communicator");
  if (!harness_names_rank(weft_get_last_error(r->comm), r->nranks - 1))
    harness_fail(r, "message does not name rank %d: %s", r->nranks - 1, weft_get_last_error(r->comm));
  /* Nothing is left half-done: the parent still works. */
  int32_t v = 1;
  harness_expect_status(r, weft_all_reduce(&v, &v, 1, WEFT_INT32, WEFT_SUM, r->comm, NULL), WEFT_SUCCESS, "parent after bad split");
  return r->failures;
}

typedef struct {
  int nranks;
  const char *transport;
  harness_body_fn body;
} params;

static void run(void **state) {
  const params *p = *state;
  harness_run_simple(p->nranks, p->transport, p->body, NULL);
}

#define SPLIT(name, n, tr, body) {name "_on_" #n "_ranks_over_" #tr, run, NULL, NULL, &(params){n, #tr, body}}

int main(void) {
  const struct CMUnitTest tests[] = {
      SPLIT("colors_rank_mod_3_form_three_children", 1, shm, colors_mod3_body),
      SPLIT("colors_rank_mod_3_form_three_children", 5, shm, colors_mod3_body),
      SPLIT("colors_rank_mod_3_form_three_children", 4, socket, colors_mod3_body),
      SPLIT("keys_order_child_ranks_ties_by_parent_rank", 4, shm, keys_reverse_body),
      SPLIT("keys_order_child_ranks_ties_by_parent_rank", 3, socket, keys_reverse_body),
      SPLIT("nocolor_ranks_get_null_and_parent_still_works", 5, shm, nocolor_body),
      SPLIT("nocolor_ranks_get_null_and_parent_still_works", 4, socket, nocolor_body),
      SPLIT("nested_split_of_a_child", 4, shm, nested_body),
      SPLIT("nested_split_of_a_child", 6, socket, nested_body),
      SPLIT("bad_color_fails_on_every_rank_naming_it", 3, shm, bad_color_body),
  };
  harness_filter_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_ib_config.c: WEFT_IB_HCA's grammar (NCCL_IB_HCA's) and the other WEFT_IB_* variables,
 * parsed without any device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "tests/harness.h"
#include "transports/ib/ib_config.h"

static weft__ib_hca_list parse_ok(const char *s) {
  weft__ib_hca_list l;
  char err[256] = "";
  int rc = weft__ib_hca_parse(s, &l, err, sizeof(err));
  if (rc != 0) fprintf(stderr, "# %s: %s\n", s ? s : "(unset)", err);
  assert_int_equal(rc, 0);
  return l;
}

static void unset_or_empty_hca_uses_every_device_and_port(void **state) {
  (void)state;
  weft__ib_hca_list a = parse_ok(NULL), b = parse_ok(""), c = parse_ok("  ");
  assert_true(weft__ib_hca_match(&a, "mlx5_0", 1));
  assert_true(weft__ib_hca_match(&b, "anything", 2));
  assert_true(weft__ib_hca_match(&c, "mlx4_0", 1));
}

static void a_name_matches_as_a_prefix(void **state) {
  (void)state;
  weft__ib_hca_list l = parse_ok("mlx5");
  assert_true(weft__ib_hca_match(&l, "mlx5_0", 1));
  assert_true(weft__ib_hca_match(&l, "mlx5_1", 2));
  assert_false(weft__ib_hca_match(&l, "mlx4_0", 1));
  assert_false(weft__ib_hca_match(&l, "mlx", 1));
}

static void equals_asks_for_exact_names(void **state) {
  (void)state;
  weft__ib_hca_list l = parse_ok("=mlx5_1");
  assert_true(l.exact);
  assert_true(weft__ib_hca_match(&l, "mlx5_1", 1));
  assert_false(weft__ib_hca_match(&l, "mlx5_10", 1));
  assert_false(weft__ib_hca_match(&l, "mlx5_0", 1));
}

static void a_port_restricts_the_match_to_it(void **state) {
  (void)state;
  weft__ib_hca_list l = parse_ok("mlx5_0:1, mlx5_1:2");
  assert_int_equal(l.n, 2);
  assert_string_equal(l.e[1].name, "mlx5_1");
  assert_int_equal(l.e[1].port, 2);
  assert_true(weft__ib_hca_match(&l, "mlx5_0", 1));
  assert_false(weft__ib_hca_match(&l, "mlx5_0", 2));
  assert_true(weft__ib_hca_match(&l, "mlx5_1", 2));
  assert_false(weft__ib_hca_match(&l, "mlx5_1", 1));
}

static void caret_excludes_the_listed_devices(void **state) {
  (void)state;
  weft__ib_hca_list l = parse_ok("^mlx5_0");
  assert_true(l.exclude);
  assert_false(weft__ib_hca_match(&l, "mlx5_0", 1));
  assert_false(weft__ib_hca_match(&l, "mlx5_0", 2));
  assert_true(weft__ib_hca_match(&l, "mlx5_1", 1));
  assert_true(weft__ib_hca_match(&l, "mlx4_0", 1));
}

static void caret_equals_excludes_one_exact_port(void **state) {
  (void)state;
  weft__ib_hca_list l = parse_ok("^=mlx5_1:2");
  assert_true(l.exclude && l.exact);
  assert_false(weft__ib_hca_match(&l, "mlx5_1", 2));
  assert_true(weft__ib_hca_match(&l, "mlx5_1", 1));
  assert_true(weft__ib_hca_match(&l, "mlx5_10", 2));
}

static void malformed_hca_lists_are_refused_with_a_reason(void **state) {
  (void)state;
  const char *bad[] = {"mlx5_0:", "mlx5_0:x", "mlx5_0:0", "mlx5_0:256", ",", "mlx5_0,", "^", "=", ":1",
                       "a_name_that_is_far_too_long_for_any_ib_device_to_have_it_really_truly"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    weft__ib_hca_list l;
    char err[256] = "";
    int rc = weft__ib_hca_parse(bad[i], &l, err, sizeof(err));
    if (rc == 0) fprintf(stderr, "# '%s' was accepted\n", bad[i]);
    assert_int_equal(rc, -1);
    assert_true(strlen(err) > 0);
    assert_int_equal(l.n, 0);
  }
}

/* ---- the other variables ---- */
static const char *const *g_vars;

static const char *get_var(const char *name) {
  for (int i = 0; g_vars[i] != NULL; i += 2)
    if (strcmp(g_vars[i], name) == 0) return g_vars[i + 1];
  return NULL;
}

static void config_defaults_are_nccl_s(void **state) {
  (void)state;
  static const char *const none[] = {NULL};
  g_vars = none;
  weft__ib_config c;
  char err[256];
  assert_int_equal(weft__ib_config_parse(&c, get_var, err, sizeof(err)), 0);
  assert_int_equal(c.gid_index, -1);
  assert_int_equal(c.timeout, 20);
  assert_int_equal(c.retry_cnt, 7);
  assert_int_equal(c.qps_per_conn, 1);
  assert_int_equal(c.disable, 0);
  assert_int_equal(c.hca.n, 0);
}

static void config_reads_every_variable(void **state) {
  (void)state;
  static const char *const vars[] = {"WEFT_IB_HCA", "=mlx5_0:1", "WEFT_IB_GID_INDEX", "3", "WEFT_IB_TIMEOUT", "14",
                                     "WEFT_IB_RETRY_CNT", "2", "WEFT_IB_QPS_PER_CONNECTION", "4", "WEFT_IB_DISABLE", "1",
                                     NULL};
  g_vars = vars;
  weft__ib_config c;
  char err[256];
  assert_int_equal(weft__ib_config_parse(&c, get_var, err, sizeof(err)), 0);
  assert_int_equal(c.gid_index, 3);
  assert_int_equal(c.timeout, 14);
  assert_int_equal(c.retry_cnt, 2);
  assert_int_equal(c.qps_per_conn, 4);
  assert_int_equal(c.disable, 1);
  assert_int_equal(c.hca.n, 1);
  assert_true(c.hca.exact);
}

static void malformed_variables_keep_their_defaults_and_are_named(void **state) {
  (void)state;
  static const char *const vars[] = {"WEFT_IB_TIMEOUT", "32", "WEFT_IB_RETRY_CNT", "x", "WEFT_IB_QPS_PER_CONNECTION", "0",
                                     "WEFT_IB_HCA", "mlx5_0:", NULL};
  g_vars = vars;
  weft__ib_config c;
  char err[1024];
  assert_int_equal(weft__ib_config_parse(&c, get_var, err, sizeof(err)), 4);
  assert_int_equal(c.timeout, 20);
  assert_int_equal(c.retry_cnt, 7);
  assert_int_equal(c.qps_per_conn, 1);
  assert_int_equal(c.hca.n, 0);
  assert_non_null(strstr(err, "WEFT_IB_TIMEOUT='32'"));
  assert_non_null(strstr(err, "WEFT_IB_RETRY_CNT='x'"));
  assert_non_null(strstr(err, "WEFT_IB_QPS_PER_CONNECTION='0'"));
  assert_non_null(strstr(err, "WEFT_IB_HCA='mlx5_0:'"));
}

int main(void) {
  harness_filter_from_env();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(unset_or_empty_hca_uses_every_device_and_port),
      cmocka_unit_test(a_name_matches_as_a_prefix),
      cmocka_unit_test(equals_asks_for_exact_names),
      cmocka_unit_test(a_port_restricts_the_match_to_it),
      cmocka_unit_test(caret_excludes_the_listed_devices),
      cmocka_unit_test(caret_equals_excludes_one_exact_port),
      cmocka_unit_test(malformed_hca_lists_are_refused_with_a_reason),
      cmocka_unit_test(config_defaults_are_nccl_s),
      cmocka_unit_test(config_reads_every_variable),
      cmocka_unit_test(malformed_variables_keep_their_defaults_and_are_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_launch.c: the first host of a Slurm host list, from which every task of an srun step
 * without PMIx derives the bootstrap root's address (lib/launch_slurm.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "lib/launch.h"

static void first_is(const char *list, const char *want) {
  char got[64];
  if (weft__slurm_first_host(list, got, sizeof(got)) != 0) fail_msg("\"%s\": refused", list);
  if (strcmp(got, want) != 0) fail_msg("\"%s\": got \"%s\", expected \"%s\"", list, got, want);
}

static void refused(const char *list) {
  char got[64];
  if (weft__slurm_first_host(list, got, sizeof(got)) == 0)
    fail_msg("\"%s\": accepted as \"%s\", expected a refusal", list, got);
}

static void slurm_first_host_of_plain_ranged_and_mixed_lists(void **state) {
  first_is("localhost", "localhost");
  first_is("node1,node2", "node1");
  first_is("node[07-09,12],gpu3", "node07");
  first_is("node[3]", "node3");
  first_is("rack[2,4]-n[1-3]", "rack2-n[1-3]"); /* only the first bracket is expanded */
  first_is("a[1-2]b,c", "a1b");
}

static void slurm_first_host_refuses_malformed_lists_and_long_names(void **state) {
  refused("");
  refused(",node1");
  refused("[1-2]");
  refused("node[");
  refused("node[x-2]");
  refused("node[1-2");
  refused("a-very-long-host-name-that-does-not-fit-in-the-sixty-four-byte-buffer.example");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(slurm_first_host_of_plain_ranged_and_mixed_lists),
      cmocka_unit_test(slurm_first_host_refuses_malformed_lists_and_long_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

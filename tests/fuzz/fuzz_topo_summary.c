/* fuzz_topo_summary.c: the topology summaries ranks all-gather as bytes at init
 * (weft__topo_merge; topo/merge.c), read as 1..8 ranks' summaries (the input zero-padded to
 * a whole number of them), then the queries every rank makes of the merged view.
 * Properties: a merged view places every rank on a host it has and numbers the ranks of a
 * host 0..n-1; links are symmetric. */
#include <stdlib.h>
#include <string.h>

#include "topo/topo.h"
#include "tests/fuzz/fuzz.h"

#define MAX_RANKS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_setup_once();
  size_t each = sizeof(weft__topo_summary);
  int n = (int)((size + each - 1) / each);
  if (n < 1 || n > MAX_RANKS) return 0;
  weft__topo_summary *all = calloc((size_t)n, each);
  memcpy(all, data, size);
  weft__topo_system sys;
  if (weft__topo_merge(all, n, &sys) == WEFT_SUCCESS) {
    FUZZ_CHECK(sys.nranks == n && sys.nhosts >= 1 && sys.nhosts <= n, "host count");
    int seen[MAX_RANKS] = {0};
    for (int r = 0; r < n; r++) {
      int h = sys.ranks[r].host;
      FUZZ_CHECK(h >= 0 && h < sys.nhosts, "a rank's host exists");
      FUZZ_CHECK(sys.ranks[r].local_rank == seen[h]++, "local ranks count up within a host");
      char str[4096];
      weft__topo_cpuset_str(sys.ranks[r].cpuset, str, sizeof str);
      (void)weft__topo_cpuset_count(sys.ranks[r].cpuset);
      for (int q = 0; q < n; q++) {
        weft__link_class c = weft__topo_link(&sys, r, q);
        (void)weft__topo_link_name(c);
        FUZZ_CHECK(c == weft__topo_link(&sys, q, r), "links are symmetric");
      }
      (void)weft__topo_pick_hca(&sys, r);
    }
    weft__topo_system_free(&sys);
  }
  free(all);
  return 0;
}

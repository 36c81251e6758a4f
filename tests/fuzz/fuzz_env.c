/* fuzz_env.c: the parsers of environment values. Byte 0 picks the parser, the rest is the
 * value (cut at a NUL, as an environment string is):
 *   0 WEFT_* integers (weft__env_long)      1 sizes with K/M/G (weft__env_size)
 *   2 WEFT_PROTO (weft__proto_parse)        3 WEFT_ALGO filters (weft__algo_filter_parse)
 *   4 Slurm host lists (weft__slurm_first_host)
 *   5 CPU lists (weft__topo_cpuset_parse)   6 WEFT_IB_HCA (weft__ib_hca_parse)
 *   7 every WEFT_IB_* variable at once (weft__ib_config_parse)
 * Properties: a size that parses is what its digits and suffix say; the parsers that
 * promise a usable result on failure (proto, IB list) leave one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/env.h"
#include "lib/launch.h"
#include "lib/proto.h"
#include "lib/select.h"
#include "topo/topo.h"
#include "transports/ib/ib_config.h"
#include "tests/fuzz/fuzz.h"

#define VAR "WEFT_FUZZ_VALUE"

static const char *value_for_all;
static const char *get_value(const char *name) { return value_for_all; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_setup_once();
  if (size < 1) return 0;
  char *v = fuzz_strndup(data + 1, size - 1);
  char err[512];
  switch (data[0] % 8) {
  case 0:
    setenv(VAR, v, 1);
    (void)weft__env_long(VAR, -7);
    break;
  case 1: {
    setenv(VAR, v, 1);
    size_t got = weft__env_size(VAR, 12345);
    /* Plain decimal digits only, no suffix: the value is the number itself. */
    if (v[0] != '\0' && strspn(v, "0123456789") == strlen(v) && strlen(v) < 19 && (v[0] != '0' || v[1] == '\0'))
      FUZZ_CHECK(got == (size_t)strtoull(v, NULL, 10), "a decimal size is its number");
    break;
  }
  case 2: {
    unsigned mask = 99;
    if (weft__proto_parse(v, &mask, err, sizeof err) == 0)
      FUZZ_CHECK(mask != 0 && (mask & ~WEFT__PROTO_ALL) == 0, "an accepted WEFT_PROTO leaves a known protocol");
    break;
  }
  case 3: {
    weft__algo_filter f;
    (void)weft__algo_filter_parse(v, &f);
    break;
  }
  case 4: {
    char host[256];
    (void)weft__slurm_first_host(v, host, sizeof host);
    char tiny[4];
    (void)weft__slurm_first_host(v, tiny, sizeof tiny);
    break;
  }
  case 5: {
    uint8_t set[WEFT__TOPO_MAX_CPUS / 8];
    if (weft__topo_cpuset_parse(v, set) == 0) {
      char str[8192];
      weft__topo_cpuset_str(set, str, sizeof str);
      (void)weft__topo_cpuset_count(set);
    }
    break;
  }
  case 6: {
    weft__ib_hca_list l;
    if (weft__ib_hca_parse(v, &l, err, sizeof err) == 0) {
      (void)weft__ib_hca_match(&l, "mlx5_0", 1);
      (void)weft__ib_hca_match(&l, v, 2);
    }
    break;
  }
  default: {
    weft__ib_config c;
    value_for_all = v;
    (void)weft__ib_config_parse(&c, get_value, err, sizeof err);
    break;
  }
  }
  free(v);
  return 0;
}

/* fuzz_env.c: the parsers of environment values. Byte 0 picks the parser, the rest is the
 * value (cut at a NUL, as an environment string is):
 *   0 WEFT_* integers (weft__env_long)      1 sizes with K/M/G (weft__env_size)
 *   2 WEFT_PROTO (weft__proto_parse)        3 WEFT_ALGO filters (weft__algo_filter_parse)
 *   4 Slurm host lists (weft__slurm_first_host)
 *   5 CPU lists (weft__topo_cpuset_parse)
 * (WEFT_IB_* have their own target, transports/ib/tests/fuzz_ib_config.c: only files of a
 * transport include its headers, tests/include_rules.sh.)
 * Properties: a plain decimal size is its number; an accepted WEFT_PROTO leaves a protocol. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/env.h"
#include "lib/launch.h"
#include "lib/proto.h"
#include "lib/select.h"
#include "topo/topo.h"
#include "tests/fuzz/fuzz.h"

#define VAR "WEFT_FUZZ_VALUE"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_setup_once();
  if (size < 1) return 0;
  char *v = fuzz_strndup(data + 1, size - 1);
  char err[512];
  switch (data[0] % 6) {
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
  default: {
    uint8_t set[WEFT__TOPO_MAX_CPUS / 8];
    if (weft__topo_cpuset_parse(v, set) == 0) {
      char str[8192];
      weft__topo_cpuset_str(set, str, sizeof str);
      (void)weft__topo_cpuset_count(set);
    }
    break;
  }
  }
  free(v);
  return 0;
}

/* fuzz_ib_config.c: the WEFT_IB_* environment values (transports/ib/ib_config.c), a fuzz
 * target of tests/fuzz/ (see tests/fuzz/fuzz.h; here because only the ib transport's own
 * files include its headers). Byte 0 picks the parser, the rest is the value:
 *   even: WEFT_IB_HCA (weft__ib_hca_parse), then the list's matching;
 *   odd:  every WEFT_IB_* variable at once set to the value (weft__ib_config_parse).
 * Property: a list that fails to parse is left empty (ib_config.h says so). */
#include <stdlib.h>
#include <string.h>

#include "transports/ib/ib_config.h"
#include "tests/fuzz/fuzz.h"

static const char *value_for_all;
static const char *get_value(const char *name) { return value_for_all; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_setup_once();
  if (size < 1) return 0;
  char *v = fuzz_strndup(data + 1, size - 1);
  char err[512];
  if (data[0] % 2 == 0) {
    weft__ib_hca_list l;
    if (weft__ib_hca_parse(v, &l, err, sizeof err) == 0) {
      (void)weft__ib_hca_match(&l, "mlx5_0", 1);
      (void)weft__ib_hca_match(&l, v, 2);
    } else {
      FUZZ_CHECK(l.n == 0, "a refused list is empty");
    }
  } else {
    weft__ib_config c;
    value_for_all = v;
    (void)weft__ib_config_parse(&c, get_value, err, sizeof err);
  }
  free(v);
  return 0;
}

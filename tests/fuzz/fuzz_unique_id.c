/* fuzz_unique_id.c: the unique id's string form (weft_unique_id_from_string: what weftrun
 * and users pass between processes, e.g. through WEFT_UNIQUE_ID), then the id's layout as
 * init reads it (weft__id_check, the root's address).
 * Properties: a string that parses prints back as itself (hex case aside); an id that
 * passes the check gives an address that converts back to the same id fields. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "lib/bootstrap.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_setup_once();
  char *s = fuzz_strndup(data, size);
  weft_unique_id_t id;
  if (weft_unique_id_from_string(s, &id) == WEFT_SUCCESS) {
    char back[WEFT_UNIQUE_ID_STRING_BYTES];
    FUZZ_CHECK(weft_unique_id_to_string(&id, back) == WEFT_SUCCESS, "to_string of a parsed id");
    FUZZ_CHECK(strcasecmp(back, s) == 0, "string -> id -> string gives the string back");
    weft__id_layout l;
    memcpy(&l, id.internal, sizeof l);
    if (weft__id_check(&l) == WEFT_SUCCESS) {
      weft__sockaddr a;
      weft__id_get_root(&l, &a);
      char where[80];
      weft__sockaddr_str(&a, where, sizeof where);
      weft__id_layout again = l;
      weft__id_set_root(&again, &a);
      FUZZ_CHECK(again.family == l.family && again.port == l.port, "family and port survive");
      FUZZ_CHECK(memcmp(again.addr, l.addr, l.family == AF_INET ? 4 : 16) == 0, "address survives");
    }
  }
  free(s);
  return 0;
}

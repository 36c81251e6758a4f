/* fuzz_topo_xml.c: the topology file (WEFT_TOPO_FILE, read with libxml2 by topo/xml_load.c),
 * from memory through weft__topo_xml_parse (the path weft__topo_xml_load takes after reading).
 * Property: a view that loads is written back by weft__topo_xml_dump and loads again as
 * the same view (what weft-topo --dump / an edited file rely on). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h> /* memfd_create (config.h defines _GNU_SOURCE) */
#include <unistd.h>

#include "topo/topo.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_setup_once();
  weft__topo_system sys;
  if (weft__topo_xml_parse((const char *)data, size, "fuzz.xml", &sys) != WEFT_SUCCESS) return 0;
  /* Round trip through a memory file: dump opens it by path, as a user's file. */
  static int fd = -1;
  if (fd < 0) fd = memfd_create("weft-fuzz-topo", 0);
  FUZZ_CHECK(fd >= 0, "memfd_create");
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  FUZZ_CHECK(weft__topo_xml_dump(&sys, path) == WEFT_SUCCESS, "a loaded view can be dumped");
  weft__topo_system again;
  FUZZ_CHECK(weft__topo_xml_load(path, &again) == WEFT_SUCCESS, "a dumped view loads");
  FUZZ_CHECK(weft__topo_system_equal(&sys, &again), "dump then load gives the same view");
  weft__topo_system_free(&again);
  weft__topo_system_free(&sys);
  return 0;
}

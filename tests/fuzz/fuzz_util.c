/* fuzz_util.c: helpers of the fuzz targets (see fuzz.h). */
#include "tests/fuzz/fuzz.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fuzz_setup_once(void) {
  static int done;
  if (done) return;
  done = 1;
  setenv("WEFT_DEBUG", "NONE", 1);
  signal(SIGPIPE, SIG_IGN);
}

char *fuzz_strndup(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (s == NULL) abort();
  if (size > 0) memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

void fuzz_fail(const char *file, int line, const char *what) {
  fprintf(stderr, "%s:%d: property failed: %s\n", file, line, what);
  abort();
}

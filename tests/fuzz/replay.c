/* replay.c: feeds every file of a seed directory to a fuzz target's LLVMFuzzerTestOneInput,
 * as a quick test of the normal suite (TAP, one line per file). The directory is the first
 * argument, else FUZZ_SEEDS (set at build time to the target's tests/fuzz/seeds/<name>).
 * A seed that makes the target crash or abort ends this program with that signal, which the
 * TAP driver reports as a failure; an empty or missing directory fails too. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz.h"

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : FUZZ_SEEDS;
  DIR *d = opendir(dir);
  if (d == NULL) {
    printf("Bail out! cannot open seed directory %s\n", dir);
    return 1;
  }
  char *names[256];
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && n < 256;)
    if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
  closedir(d);
  if (n == 0) {
    printf("Bail out! no seed files in %s\n", dir);
    return 1;
  }
  qsort(names, (size_t)n, sizeof names[0], by_name);
  printf("1..%d\n", n);
  fflush(stdout);
  for (int i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
      printf("not ok %d - %s: cannot read\n", i + 1, names[i]);
      return 1;
    }
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    /* A private copy of exactly len bytes, as libFuzzer passes it (reads past it are caught). */
    uint8_t *data = malloc(len ? len : 1);
    memcpy(data, buf, len);
    LLVMFuzzerTestOneInput(data, len);
    free(data);
    printf("ok %d - %s (%zu bytes)\n", i + 1, names[i], len);
    fflush(stdout);
    free(names[i]);
  }
  return 0;
}

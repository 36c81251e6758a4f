/* trainers/data.c: loads a text file for training, splits it and draws batches; see data.h. */
#include "trainers/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *read_file(const char *path, size_t *n, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot open training text %s: %s", path, strerror(errno));
    return NULL;
  }
  unsigned char *buf = NULL;
  size_t cap = 0, len = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 1 << 20;
      unsigned char *nb = realloc(buf, cap);
      if (!nb) break;
      buf = nb;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  int bad = ferror(f) || len == cap; /* len == cap here only if realloc failed */
  fclose(f);
  if (bad || !buf) {
    snprintf(err, errlen, "cannot read training text %s", path);
    free(buf);
    return NULL;
  }
  *n = len;
  return buf;
}

int gpt_dataset_load(gpt_dataset *ds, const char *path, double train_frac, char *err, size_t errlen) {
  memset(ds, 0, sizeof(*ds));
  size_t n = 0;
  unsigned char *text = read_file(path, &n, err, errlen);
  if (!text) return -1;
  if (n < 1024) {
    snprintf(err, errlen, "training text %s is too short (%zu bytes, need at least 1024)", path, n);
    free(text);
    return -1;
  }
  gpt_tokenizer_build(&ds->tok, text, n);
  ds->tokens = malloc(n * sizeof(int));
  if (!ds->tokens) {
    snprintf(err, errlen, "out of memory encoding %s (%zu bytes)", path, n);
    free(text);
    return -1;
  }
  gpt_tokenizer_encode(&ds->tok, text, n, ds->tokens, NULL);
  free(text);
  ds->ntokens = n;
  ds->ntrain = (size_t)(train_frac * (double)n);
  ds->train = ds->tokens;
  ds->val = ds->tokens + ds->ntrain;
  ds->nval = n - ds->ntrain;
  return 0;
}

void gpt_dataset_free(gpt_dataset *ds) {
  free(ds->tokens);
  memset(ds, 0, sizeof(*ds));
}

static void copy_window(const int *split, size_t off, int T, int *x, int *y) {
  memcpy(x, split + off, (size_t)T * sizeof(int));
  memcpy(y, split + off + 1, (size_t)T * sizeof(int));
}

void gpt_batch_random(const int *split, size_t n, int B, int T, gpt_rng *rng, int *x, int *y) {
  for (int b = 0; b < B; b++)
    copy_window(split, gpt_rng_below(rng, n - (size_t)T), T, x + (size_t)b * T, y + (size_t)b * T);
}

void gpt_batch_fixed(const int *split, size_t n, int B, int T, size_t first, int *x, int *y) {
  size_t windows = (n - 1) / (size_t)T;
  for (int b = 0; b < B; b++) {
    size_t off = ((first + (size_t)b) % windows) * (size_t)T;
    copy_window(split, off, T, x + (size_t)b * T, y + (size_t)b * T);
  }
}

/* trainers/data.h: the character-level tokenizer and the text dataset of the trainers.
 *
 * The tokenizer maps each distinct BYTE of the training text to an id, in byte order, so
 * the same text always yields the same vocabulary (UTF-8 text is handled byte by byte).
 * The dataset is the whole file encoded once and split by position: the first 90% trains,
 * the last 10% validates. Training batches are B windows of T+1 tokens at offsets drawn
 * from a seeded RNG (input = window[0..T), target = window[1..T]); validation batches are
 * fixed consecutive windows, so every evaluation scores the same tokens.
 */
#ifndef WEFT_TRAINERS_DATA_H
#define WEFT_TRAINERS_DATA_H

#include <stddef.h>

#include "trainers/rng.h"

typedef struct gpt_tokenizer {
  int vocab;
  unsigned char chars[256]; /* id -> byte */
  int index[256];           /* byte -> id, -1 if absent */
} gpt_tokenizer;

/* Builds the vocabulary from text. */
void gpt_tokenizer_build(gpt_tokenizer *tok, const unsigned char *text, size_t n);
/* Rebuilds a tokenizer from its chars (as stored in a checkpoint). */
void gpt_tokenizer_from_chars(gpt_tokenizer *tok, const unsigned char *chars, int vocab);
/* Encodes n bytes into out; returns -1 (and the offset in *bad) on a byte outside the vocab. */
int gpt_tokenizer_encode(const gpt_tokenizer *tok, const unsigned char *text, size_t n, int *out,
                         size_t *bad);
/* Decodes n ids into out (n bytes, not terminated). */
void gpt_tokenizer_decode(const gpt_tokenizer *tok, const int *ids, size_t n, unsigned char *out);

typedef struct gpt_dataset {
  gpt_tokenizer tok;
  int *tokens; /* the whole text, encoded */
  size_t ntokens;
  const int *train, *val;
  size_t ntrain, nval;
} gpt_dataset;

/* Loads a text file, builds the tokenizer and splits train/val (train_frac of the tokens
 * train). Returns -1 with a message in err when the file is missing, unreadable or too short. */
int gpt_dataset_load(gpt_dataset *ds, const char *path, double train_frac, char *err, size_t errlen);
void gpt_dataset_free(gpt_dataset *ds);

/* B random windows of a split: x, y are [B, T]. n must be > T. */
void gpt_batch_random(const int *split, size_t n, int B, int T, gpt_rng *rng, int *x, int *y);
/* B consecutive windows starting at window index first (windows are T apart, wrapping). */
void gpt_batch_fixed(const int *split, size_t n, int B, int T, size_t first, int *x, int *y);

#endif

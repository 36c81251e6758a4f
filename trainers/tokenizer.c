/* trainers/tokenizer.c: the character-level (byte-level) tokenizer of the trainers; see data.h. */
#include "trainers/data.h"

#include <string.h>

void gpt_tokenizer_from_chars(gpt_tokenizer *tok, const unsigned char *chars, int vocab) {
  tok->vocab = vocab;
  memset(tok->chars, 0, sizeof(tok->chars));
  for (int c = 0; c < 256; c++)
    tok->index[c] = -1;
  for (int i = 0; i < vocab; i++) {
    tok->chars[i] = chars[i];
    tok->index[chars[i]] = i;
  }
}

void gpt_tokenizer_build(gpt_tokenizer *tok, const unsigned char *text, size_t n) {
  unsigned char seen[256] = {0}, chars[256];
  int vocab = 0;
  for (size_t i = 0; i < n; i++)
    seen[text[i]] = 1;
  for (int c = 0; c < 256; c++)
    if (seen[c]) chars[vocab++] = (unsigned char)c;
  gpt_tokenizer_from_chars(tok, chars, vocab);
}

int gpt_tokenizer_encode(const gpt_tokenizer *tok, const unsigned char *text, size_t n, int *out,
                         size_t *bad) {
  for (size_t i = 0; i < n; i++) {
    out[i] = tok->index[text[i]];
    if (out[i] < 0) {
      if (bad) *bad = i;
      return -1;
    }
  }
  return 0;
}

void gpt_tokenizer_decode(const gpt_tokenizer *tok, const int *ids, size_t n, unsigned char *out) {
  for (size_t i = 0; i < n; i++)
    out[i] = ids[i] >= 0 && ids[i] < tok->vocab ? tok->chars[ids[i]] : '?';
}

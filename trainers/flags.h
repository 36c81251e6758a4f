/* trainers/flags.h: the long-option parser the weft trainers share.
 *
 * A trainer lists its flags as a table (name, kind, destination, range); the parser turns
 * each "--name value" (or a bare "--name" for a switch) into the destination's type and
 * refuses values outside the range with a message naming the program and the flag, so
 * every trainer reports bad input the same way.
 */
#ifndef WEFT_TRAINERS_FLAGS_H
#define WEFT_TRAINERS_FLAGS_H

#include <stdio.h>

typedef struct gpt_flag {
  const char *name;
  enum { GPT_FLAG_STR, GPT_FLAG_INT, GPT_FLAG_FLOAT, GPT_FLAG_SWITCH } kind;
  void *dst;   /* const char **, int *, float *, int * (set to 1) */
  long lo, hi; /* GPT_FLAG_INT only */
} gpt_flag;

/* Parses argv against flags; --help prints usage to stdout and exits 0. Returns -1 (after
 * printing the problem and the usage to stderr) on an unknown flag, a bad value or a
 * stray argument. */
int gpt_parse_flags(const char *prog, int argc, char **argv, const gpt_flag *flags, int nflags,
                    void (*usage)(FILE *f));

#endif

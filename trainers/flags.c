/* trainers/flags.c: the trainers' long-option parser; see flags.h. */
#include "trainers/flags.h"

#include <getopt.h>
#include <stdlib.h>

static int set_flag(const char *prog, const gpt_flag *fl, const char *arg) {
  char *end;
  if (fl->kind == GPT_FLAG_SWITCH) {
    *(int *)fl->dst = 1;
    return 0;
  }
  if (fl->kind == GPT_FLAG_STR) {
    *(const char **)fl->dst = arg;
    return 0;
  }
  if (fl->kind == GPT_FLAG_FLOAT) {
    double v = strtod(arg, &end);
    if (*arg == '\0' || *end != '\0' || !(v >= 0)) {
      fprintf(stderr, "%s: --%s %s: expected a non-negative number\n", prog, fl->name, arg);
      return -1;
    }
    *(float *)fl->dst = (float)v;
    return 0;
  }
  long v = strtol(arg, &end, 10);
  if (*arg == '\0' || *end != '\0' || v < fl->lo || v > fl->hi) {
    fprintf(stderr, "%s: --%s %s: expected an integer in %ld..%ld\n", prog, fl->name, arg, fl->lo, fl->hi);
    return -1;
  }
  *(int *)fl->dst = (int)v;
  return 0;
}

int gpt_parse_flags(const char *prog, int argc, char **argv, const gpt_flag *flags, int nflags,
                    void (*usage)(FILE *f)) {
  struct option *opts = calloc((size_t)nflags + 2, sizeof(*opts));
  if (!opts) return -1;
  opts[0] = (struct option){"help", no_argument, 0, 'h'};
  for (int i = 0; i < nflags; i++)
    opts[i + 1] = (struct option){
        flags[i].name, flags[i].kind == GPT_FLAG_SWITCH ? no_argument : required_argument, 0, 1000 + i};
  int c, rc = 0;
  argv[0] = (char *)prog; /* getopt's messages: not the libtool ".libs/" path */
  while (rc == 0 && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (c == 'h') {
      usage(stdout);
      exit(0);
    }
    if (c < 1000 || c >= 1000 + nflags) {
      usage(stderr);
      rc = -1;
    } else {
      rc = set_flag(prog, &flags[c - 1000], optarg);
    }
  }
  free(opts);
  if (rc == 0 && optind < argc) {
    fprintf(stderr, "%s: unexpected argument %s\n", prog, argv[optind]);
    usage(stderr);
    rc = -1;
  }
  return rc;
}

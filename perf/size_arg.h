/* size_arg.h: a byte count as nccl-tests' -b/-e/-i take it, shared by the perf tools
 * (perf/options.c) and the standalone floors (perf/membw_floor.c, perf/tcp_floor.c). */
#ifndef WEFT_PERF_SIZE_ARG_H
#define WEFT_PERF_SIZE_ARG_H
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

/* "64", "1K", "32M", "1G" (powers of 1024, fractions allowed) into *out bytes; 0, or -1
 * (nothing written) for anything else: a negative or unparsable number, another suffix. */
static inline int perf_parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0)
    return -1;
  double unit = 1;
  switch (*end) {
  case 'G': case 'g': unit = 1024.0 * 1024 * 1024; end++; break;
  case 'M': case 'm': unit = 1024.0 * 1024; end++; break;
  case 'K': case 'k': unit = 1024.0; end++; break;
  default: break;
  }
  if (*end)
    return -1;
  *out = (size_t)(v * unit);
  return 0;
}
#endif

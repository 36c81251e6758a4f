/* log.c: leveled logging (WEFT_DEBUG). One fprintf per line so lines of concurrent ranks
 * and threads do not interleave mid-line. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "lib/log.h"

static int log_level = -1;
static __thread int log_rank = -1;

/* The level WEFT_DEBUG names; -1 when it names none. */
static int parse_level(const char *s) {
  if (s == NULL || *s == '\0') return WEFT__LOG_WARN;
  if (strcasecmp(s, "NONE") == 0 || strcmp(s, "0") == 0) return WEFT__LOG_NONE;
  if (strcasecmp(s, "WARN") == 0) return WEFT__LOG_WARN;
  if (strcasecmp(s, "INFO") == 0) return WEFT__LOG_INFO;
  if (strcasecmp(s, "TRACE") == 0) return WEFT__LOG_TRACE;
  return -1;
}

int weft__log_level(void) {
  int level = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
  if (level < 0) {
    const char *s = getenv("WEFT_DEBUG");
    level = parse_level(s);
    int unknown = level < 0;
    if (unknown) level = WEFT__LOG_WARN;
    /* first to store says it (threads may race here; one warning is enough) */
    if (__atomic_exchange_n(&log_level, level, __ATOMIC_RELAXED) < 0 && unknown)
      weft__log_write(WEFT__LOG_WARN, "WEFT_DEBUG=%s is not a level; valid: NONE, WARN, INFO, TRACE; "
                      "using WARN", s);
  }
  return level;
}

void weft__log_set_rank(int rank) { log_rank = rank; }

void weft__log_write(int level, const char *fmt, ...) {
  static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
  char host[64] = "?";
  char msg[1200];
  gethostname(host, sizeof(host) - 1);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  char who[16] = "";
  if (log_rank >= 0) snprintf(who, sizeof(who), " [%d]", log_rank);
  fprintf(stderr, "%s:%d:%ld%s weft %s %s\n", host, (int)getpid(), (long)syscall(SYS_gettid), who,
          names[level], msg);
}

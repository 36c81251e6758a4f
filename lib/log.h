/* log.h: leveled logging to stderr, controlled by WEFT_DEBUG=WARN|INFO|TRACE (as NCCL_DEBUG).
 * Lines read "host:pid:tid [rank] weft LEVEL message" so interleaved output of many ranks
 * can be told apart. */
#ifndef WEFT_LOG_H
#define WEFT_LOG_H

enum { WEFT__LOG_NONE = 0, WEFT__LOG_WARN = 1, WEFT__LOG_INFO = 2, WEFT__LOG_TRACE = 3 };

/* The level in force (read once from WEFT_DEBUG; default WARN). Thread-safe. */
int weft__log_level(void);
/* Sets the rank printed in this thread's log lines (-1: none). */
void weft__log_set_rank(int rank);
void weft__log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define WEFT_WARN(...) \
  do { if (weft__log_level() >= WEFT__LOG_WARN) weft__log_write(WEFT__LOG_WARN, __VA_ARGS__); } while (0)
#define WEFT_INFO(...) \
  do { if (weft__log_level() >= WEFT__LOG_INFO) weft__log_write(WEFT__LOG_INFO, __VA_ARGS__); } while (0)
#define WEFT_TRACE(...) \
  do { if (weft__log_level() >= WEFT__LOG_TRACE) weft__log_write(WEFT__LOG_TRACE, __VA_ARGS__); } while (0)

#endif

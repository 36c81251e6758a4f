/* status.h: raising errors with a message that names rank, peer, operation and its sequence
 * number. Messages are stored per communicator and per thread (weft_get_last_error). */
#ifndef WEFT_STATUS_H
#define WEFT_STATUS_H
#include "weft.h"

struct weft_comm;

/* Formats the message, records it as the last error of comm (may be NULL) and of the
 * calling thread, logs it at WARN level, and returns status. Thread-safe. */
weft_status_t weft__error(struct weft_comm *comm, weft_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* While quiet (per thread), weft__error records but does not log: the caller re-raises the
 * error with more context and logs once. A communicator's calls use its own flag
 * (weft_comm.errors_quiet, lib/comm.h), which is cheaper to set. */
void weft__error_quiet(int quiet);

/* The symbolic name of a status ("WEFT_ERR_TIMEOUT"). */
const char *weft__status_name(weft_status_t status);

/* The calling thread's last error message buffer (weft_get_last_error(NULL)). */
const char *weft__thread_last_error(void);

#define WEFT_TRY(expr)                      \
  do {                                      \
    weft_status_t weft_try_st_ = (expr);    \
    if (weft_try_st_ != WEFT_SUCCESS) return weft_try_st_; \
  } while (0)
#endif

/* status.c: status strings and error recording. The X-macro list in weft.h generates both
 * tables, so a new status cannot miss its text. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "lib/comm.h"
#include "lib/log.h"
#include "lib/status.h"

static __thread char thread_last_error[1024];
static __thread int quiet;

void weft__error_quiet(int q) { quiet = q; }

const char *weft_get_error_string(weft_status_t status) {
  switch (status) {
#define WEFT_STATUS_TEXT_(name, value, text) case name: return text;
    WEFT_STATUS_LIST(WEFT_STATUS_TEXT_)
#undef WEFT_STATUS_TEXT_
    default: return "unknown status";
  }
}

const char *weft__status_name(weft_status_t status) {
  switch (status) {
#define WEFT_STATUS_NAME_(name, value, text) case name: return #name;
    WEFT_STATUS_LIST(WEFT_STATUS_NAME_)
#undef WEFT_STATUS_NAME_
    default: return "WEFT_UNKNOWN_STATUS";
  }
}

const char *weft__thread_last_error(void) { return thread_last_error; }

weft_status_t weft__error(struct weft_comm *comm, weft_status_t status, const char *fmt, ...) {
  char msg[sizeof(thread_last_error)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  memcpy(thread_last_error, msg, sizeof(msg));
  if (comm != NULL) {
    pthread_mutex_lock(&comm->err_lock);
    memcpy(comm->last_error, msg, sizeof(comm->last_error));
    pthread_mutex_unlock(&comm->err_lock);
  }
  int comm_quiet = comm != NULL && atomic_load_explicit(&comm->errors_quiet, memory_order_relaxed);
  if (!quiet && !comm_quiet) WEFT_WARN("%s (%s)", msg, weft__status_name(status));
  return status;
}

const char *weft_get_last_error(weft_comm_t comm) {
  if (comm == NULL) return thread_last_error;
  /* Copy under the lock into this thread's buffer so the caller's string cannot change
   * under it while another thread raises an error on comm. */
  static __thread char copy[sizeof(((struct weft_comm *)0)->last_error)];
  pthread_mutex_lock(&comm->err_lock);
  memcpy(copy, comm->last_error, sizeof(copy));
  pthread_mutex_unlock(&comm->err_lock);
  return copy;
}

weft_status_t weft_get_version(int *version) {
  if (version == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_get_version: version is NULL");
  *version = WEFT_VERSION_CODE;
  return WEFT_SUCCESS;
}

/* emu_fault.c: fault injection, from WEFT_VERBS_EMU_FAULT (read once per process), a
 * comma-separated list of:
 *   wr=N:STATUS   the N-th send WR this process posts (1-based, over all its QPs) completes
 *                 with STATUS: retry_exc, rnr_retry, rem_access, rem_inv_req, rem_op,
 *                 loc_prot, loc_len, general, or a number (enum ibv_wc_status); its QP
 *                 moves to the error state, the WRs behind it are flushed
 *   qp_error=N    the QP of the N-th send WR moves to the error state as that WR starts:
 *                 it and every WR after it, and the posted receives, are flushed
 *   fatal=N       at the N-th send WR the device raises IBV_EVENT_DEVICE_FATAL and every QP
 *                 of the context moves to the error state
 *   delay_us=D    every WR executes (and so completes, on both sides) D us after its post
 * e.g. WEFT_VERBS_EMU_FAULT=wr=3:rem_access or WEFT_VERBS_EMU_FAULT=delay_us=2000.
 * A malformed list is reported on stderr and injects nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "emu.h"

static struct {
  uint64_t wr_n, qp_error_n, fatal_n, delay_ns;
  int wr_status;
} g;
static uint64_t g_count;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int status_by_name(const char *s, int *out) {
  static const struct { const char *name; int status; } t[] = {
      {"retry_exc", IBV_WC_RETRY_EXC_ERR}, {"rnr_retry", IBV_WC_RNR_RETRY_EXC_ERR},
      {"rem_access", IBV_WC_REM_ACCESS_ERR}, {"rem_inv_req", IBV_WC_REM_INV_REQ_ERR},
      {"rem_op", IBV_WC_REM_OP_ERR}, {"loc_prot", IBV_WC_LOC_PROT_ERR},
      {"loc_len", IBV_WC_LOC_LEN_ERR}, {"general", IBV_WC_GENERAL_ERR}};
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
    if (strcmp(s, t[i].name) == 0) return *out = t[i].status, 0;
  char *end;
  long v = strtol(s, &end, 0);
  if (end == s || *end != '\0' || v <= IBV_WC_SUCCESS || v > IBV_WC_TM_RNDV_INCOMPLETE) return -1;
  *out = (int)v;
  return 0;
}

static int parse_one(char *item) {
  char *eq = strchr(item, '=');
  if (eq == NULL) return -1;
  *eq = '\0';
  char *v = eq + 1, *end;
  unsigned long long n = strtoull(v, &end, 10);
  if (end == v || n == 0) return -1;
  if (strcmp(item, "wr") == 0) {
    if (*end != ':' || status_by_name(end + 1, &g.wr_status) != 0) return -1;
    g.wr_n = n;
    return 0;
  }
  if (*end != '\0') return -1;
  if (strcmp(item, "qp_error") == 0) g.qp_error_n = n;
  else if (strcmp(item, "fatal") == 0) g.fatal_n = n;
  else if (strcmp(item, "delay_us") == 0) g.delay_ns = n * 1000ull;
  else return -1;
  return 0;
}

static void parse(void) {
  const char *env = getenv("WEFT_VERBS_EMU_FAULT");
  if (env == NULL || env[0] == '\0') return;
  char *list = strdup(env), *save = NULL;
  for (char *item = strtok_r(list, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save))
    if (parse_one(item) != 0) {
      fprintf(stderr, "weft verbs emulator: WEFT_VERBS_EMU_FAULT='%s' is malformed; no fault injected\n", env);
      memset(&g, 0, sizeof(g));
      break;
    }
  free(list);
}

int emu_fault_for_next_wr(int *status) {
  pthread_once(&g_once, parse);
  uint64_t n = __atomic_add_fetch(&g_count, 1, __ATOMIC_RELAXED);
  if (n == g.wr_n) return *status = g.wr_status, EMU_FAULT_WR_STATUS;
  if (n == g.qp_error_n) return EMU_FAULT_QP_ERROR;
  if (n == g.fatal_n) return EMU_FAULT_FATAL;
  return EMU_FAULT_NONE;
}

uint64_t emu_fault_delay_ns(void) {
  pthread_once(&g_once, parse);
  return g.delay_ns;
}

/* launch_slurm.c: the bootstrap root's address under srun without PMIx (see lib/launch.h).
 *
 * Slurm tells every task the step's node list and ids but runs nothing on weft's behalf, so
 * all tasks compute the same address from them: task 0 runs on the first node of the list
 * (Slurm's block and cyclic distributions both start there) and opens the root; the others
 * connect to it, retrying until it listens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/launch.h"
#include "lib/status.h"

#define PORT_BASE 20000
#define PORT_SPAN 20000

int weft__slurm_first_host(const char *list, char *out, size_t len) {
  if (list == NULL || *list == '\0' || *list == ',' || *list == '[') return -1;
  const char *open = NULL, *p = list;
  while (*p && *p != ',' && *p != '[') p++;
  if (*p == '[') open = p;
  size_t prefix = (size_t)(p - list);
  if (open == NULL) { /* a plain name */
    if (prefix >= len) return -1;
    memcpy(out, list, prefix);
    out[prefix] = '\0';
    return 0;
  }
  const char *first = open + 1, *end = first; /* the first number of the range, leading zeros kept */
  while (*end >= '0' && *end <= '9') end++;
  const char *close = strchr(open, ']');
  if (end == first || close == NULL || (*end != '-' && *end != ',' && *end != ']')) return -1;
  const char *suffix = close + 1;
  size_t slen = strcspn(suffix, ",");
  size_t need = prefix + (size_t)(end - first) + slen;
  if (need >= len) return -1;
  snprintf(out, len, "%.*s%.*s%.*s", (int)prefix, list, (int)(end - first), first, (int)slen, suffix);
  return 0;
}

weft_status_t weft__slurm_root_addr(weft__sockaddr *addr, char *port_str, size_t port_len) {
  const char *list = getenv("SLURM_STEP_NODELIST");
  if (list == NULL) list = getenv("SLURM_JOB_NODELIST");
  const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
  if (list == NULL || job == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_USAGE,
                       "Slurm set SLURM_PROCID but not %s: set WEFT_ROOT_ADDR=host:port or "
                       "MASTER_ADDR and MASTER_PORT", list == NULL ? "SLURM_STEP_NODELIST" : "SLURM_JOB_ID");
  char host[256];
  if (weft__slurm_first_host(list, host, sizeof(host)) != 0)
    return weft__error(NULL, WEFT_ERR_INVALID_USAGE,
                       "cannot read the first node of the Slurm node list \"%s\": set WEFT_ROOT_ADDR=host:port",
                       list);
  unsigned long long key = strtoull(job, NULL, 10) * 64 + (step ? strtoull(step, NULL, 10) : 0);
  snprintf(port_str, port_len, "%llu", PORT_BASE + key % PORT_SPAN);
  return weft__sockaddr_parse(host, port_str, addr);
}

/* comm_env.c: weft_comm_init_from_env, rank and size from the launcher's environment.
 *
 * weftrun hands every rank the unique id itself. Other launchers (Open MPI, Slurm, torchrun)
 * know nothing of weft, so the ranks agree on a root address instead (WEFT_ROOT_ADDR or
 * torchrun's MASTER_ADDR/MASTER_PORT): rank 0 opens the root there and every rank joins it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/bootstrap.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/status.h"

typedef struct {
  const char *launcher, *rank_var, *size_var;
} launcher_env;

static const launcher_env launchers[] = {
    {"weftrun", "WEFT_RANK", "WEFT_NRANKS"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS"},
    {"PMI", "PMI_RANK", "PMI_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE"},
};

static weft_status_t parse_int(const char *name, int *out) {
  const char *v = getenv(name);
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0 || x > 1 << 24)
    return weft__error(NULL, WEFT_ERR_INVALID_USAGE, "weft_comm_init_from_env: %s=%s is not a valid number",
                       name, v);
  *out = (int)x;
  return WEFT_SUCCESS;
}

static weft_status_t find_rank_size(int *rank, int *size) {
  for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
    if (getenv(launchers[i].rank_var) == NULL || getenv(launchers[i].size_var) == NULL) continue;
    WEFT_TRY(parse_int(launchers[i].rank_var, rank));
    WEFT_TRY(parse_int(launchers[i].size_var, size));
    WEFT_INFO("rank %d of %d from the %s environment", *rank, *size, launchers[i].launcher);
    return WEFT_SUCCESS;
  }
  return weft__error(NULL, WEFT_ERR_INVALID_USAGE,
                     "weft_comm_init_from_env: no launcher environment found (weftrun's WEFT_RANK, "
                     "Open MPI's OMPI_COMM_WORLD_RANK, Slurm's SLURM_PROCID, torchrun's RANK/WORLD_SIZE)");
}

/* FNV-1a over the job's identity, stretched to 16 bytes: keeps two jobs that share a port apart. */
static void derive_secret(uint8_t secret[16], const char *port) {
  const char *job = getenv("SLURM_JOB_ID");
  if (job == NULL) job = getenv("OMPI_MCA_ess_base_jobid");
  if (job == NULL) job = getenv("TORCHELASTIC_RUN_ID");
  if (job == NULL) job = "";
  uint64_t h = 14695981039346656037ull;
  for (int round = 0; round < 2; round++) {
    for (const char *s = job; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    for (const char *s = port; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    h = (h ^ (uint64_t)round) * 1099511628211ull;
    memcpy(secret + 8 * round, &h, 8);
  }
}

static weft_status_t parse_secret(const char *hex, uint8_t secret[16]) {
  if (strlen(hex) != 32)
    return weft__error(NULL, WEFT_ERR_INVALID_USAGE, "WEFT_SECRET must be 32 hex digits");
  for (int i = 0; i < 16; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1)
      return weft__error(NULL, WEFT_ERR_INVALID_USAGE, "WEFT_SECRET must be 32 hex digits");
    secret[i] = (uint8_t)v;
  }
  return WEFT_SUCCESS;
}

/* Builds the id from the agreed root address; rank 0 opens the root there. */
static weft_status_t id_from_root_addr(int rank, weft_unique_id_t *id) {
  weft__sockaddr addr;
  const char *root = getenv("WEFT_ROOT_ADDR");
  const char *port = NULL;
  if (root != NULL) {
    WEFT_TRY(weft__sockaddr_parse(root, NULL, &addr));
    port = strrchr(root, ':') + 1;
  } else if (getenv("MASTER_ADDR") != NULL && getenv("MASTER_PORT") != NULL) {
    port = getenv("MASTER_PORT");
    WEFT_TRY(weft__sockaddr_parse(getenv("MASTER_ADDR"), port, &addr));
  } else {
    return weft__error(NULL, WEFT_ERR_INVALID_USAGE,
                       "weft_comm_init_from_env: set WEFT_UNIQUE_ID (weftrun does), WEFT_ROOT_ADDR=host:port, "
                       "or MASTER_ADDR and MASTER_PORT so the ranks can find the bootstrap root");
  }
  weft__id_layout l;
  memset(&l, 0, sizeof(l));
  l.magic = WEFT__ID_MAGIC;
  l.version = WEFT__ID_VERSION;
  const char *secret = getenv("WEFT_SECRET");
  if (secret != NULL) WEFT_TRY(parse_secret(secret, l.secret));
  else derive_secret(l.secret, port);
  if (rank == 0) {
    weft__sockaddr bind_addr = addr;
    WEFT_TRY(weft__bootstrap_root_start(&bind_addr, l.secret, (int)weft__env_long("WEFT_TIMEOUT_MS", 120000)));
  }
  weft__id_set_root(&l, &addr);
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &l, sizeof(l));
  return WEFT_SUCCESS;
}

weft_status_t weft_comm_init_from_env(weft_comm_t *comm, const weft_config_t *config) {
  if (comm == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_comm_init_from_env: comm is NULL");
  int rank = 0, size = 0;
  WEFT_TRY(find_rank_size(&rank, &size));
  weft_unique_id_t id;
  const char *id_str = getenv("WEFT_UNIQUE_ID");
  if (id_str != NULL) WEFT_TRY(weft_unique_id_from_string(id_str, &id));
  else WEFT_TRY(id_from_root_addr(rank, &id));
  return weft_comm_init_rank_config(comm, size, id, rank, config);
}

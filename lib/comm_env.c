/* comm_env.c: weft_comm_init_from_env, rank and size from the launcher's environment.
 *
 * Which launcher: launchers nest (torchrun inside an srun step, mpirun inside a Slurm
 * allocation, weftrun anywhere), and the inner one's processes inherit the outer one's
 * variables, which then describe the wrong job (SLURM_PROCID=0 SLURM_NTASKS=1 in every
 * torchrun child). So the most specific launcher wins: weftrun, then torchrun, then mpirun
 * (Open MPI, or MPICH's hydra with PMI_RANK), then Slurm.
 *
 * Where the root is: weftrun hands every rank the unique id itself. Otherwise, in order:
 * WEFT_ROOT_ADDR or MASTER_ADDR/MASTER_PORT when set (rank 0 opens the root there); the
 * launcher's PMIx server (Open MPI, srun --mpi=pmix: lib/pmix.c); under srun without PMIx,
 * an address all tasks derive from the step (lib/launch_slurm.c). */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "lib/bootstrap.h"
#include "lib/env.h"
#include "lib/launch.h"
#include "lib/log.h"
#include "lib/status.h"

typedef struct {
  const char *launcher, *rank_var, *size_var;
  const char *job_var; /* the job's id, for the derived secret; NULL: none */
  int may_pmix;        /* its processes may have a PMIx server */
} launcher_env;

/* Most specific first (see above). */
static const launcher_env launchers[] = {
    {"weftrun", "WEFT_RANK", "WEFT_NRANKS", NULL, 0},
    {"torchrun", "RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", 0},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid", 1},
    {"PMI (MPICH hydra)", "PMI_RANK", "PMI_SIZE", NULL, 0},
    /* SLURM_STEP_NUM_TASKS, not SLURM_NTASKS: sbatch's batch script has SLURM_PROCID=0 and
     * the job's SLURM_NTASKS but is no srun step; a tool run there is a single rank */
    {"Slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_JOB_ID", 1},
};

static weft_status_t parse_int(const char *name, int *out) {
  const char *v = getenv(name);
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0 || x > 1 << 24)
    return weft__error(NULL, WEFT_ERR_INVALID_USAGE, "init from the environment: %s=%s is not a valid number",
                       name, v);
  *out = (int)x;
  return WEFT_SUCCESS;
}

/* The winning launcher's rank and size; NULL *which when no launcher started us. */
static weft_status_t find_rank_size(const launcher_env **which, int *rank, int *size) {
  *which = NULL;
  for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
    if (getenv(launchers[i].rank_var) == NULL || getenv(launchers[i].size_var) == NULL) continue;
    WEFT_TRY(parse_int(launchers[i].rank_var, rank));
    WEFT_TRY(parse_int(launchers[i].size_var, size));
    if (*size < 1 || *rank >= *size)
      return weft__error(NULL, WEFT_ERR_INVALID_USAGE, "init from the environment: %s=%d is outside %s=%d",
                         launchers[i].rank_var, *rank, launchers[i].size_var, *size);
    *which = &launchers[i];
    WEFT_INFO("rank %d of %d from the %s environment", *rank, *size, launchers[i].launcher);
    return WEFT_SUCCESS;
  }
  return WEFT_SUCCESS;
}

/* FNV-1a over the job's identity, stretched to 16 bytes: keeps two jobs that share a port apart. */
static void derive_secret(uint8_t secret[16], const launcher_env *which, const char *port) {
  const char *job = which->job_var ? getenv(which->job_var) : NULL;
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
  if (weft__parse_hex(hex, secret, 16) != 0)
    return weft__error(NULL, WEFT_ERR_INVALID_USAGE, "WEFT_SECRET has %zu characters; it must be "
                       "exactly 32 hex digits (0-9, a-f), e.g. from `openssl rand -hex 16`", strlen(hex));
  return WEFT_SUCCESS;
}

/* The port part of variable name (value text, port at port): 1..65535 (port 0 would make
 * rank 0 listen on a random port no other rank can know). */
static weft_status_t check_port(const char *name, const char *text, const char *port) {
  uint16_t p;
  if (port == NULL || weft__parse_port(port, &p) != 0)
    return weft__error(NULL, WEFT_ERR_INVALID_USAGE, "%s=%s: the port must be a number from 1 to 65535",
                       name, text);
  return WEFT_SUCCESS;
}

/* The root address the user set (WEFT_ROOT_ADDR, else MASTER_ADDR/MASTER_PORT), or under
 * srun the one derived from the step; 0 in *found when there is none. */
static weft_status_t root_addr(const launcher_env *which, weft__sockaddr *addr, char *port, size_t len,
                               int *derived, int *found) {
  const char *root = getenv("WEFT_ROOT_ADDR");
  *found = 1;
  *derived = 0;
  if (root != NULL) {
    const char *colon = strrchr(root, ':');
    WEFT_TRY(check_port("WEFT_ROOT_ADDR", root, colon != NULL ? colon + 1 : NULL));
    WEFT_TRY(weft__sockaddr_parse(root, NULL, addr));
    snprintf(port, len, "%s", colon + 1);
  } else if (getenv("MASTER_ADDR") != NULL && getenv("MASTER_PORT") != NULL) {
    WEFT_TRY(check_port("MASTER_PORT", getenv("MASTER_PORT"), getenv("MASTER_PORT")));
    snprintf(port, len, "%s", getenv("MASTER_PORT"));
    WEFT_TRY(weft__sockaddr_parse(getenv("MASTER_ADDR"), port, addr));
  } else if (strcmp(which->launcher, "Slurm") == 0 && !weft__pmix_available()) {
    *derived = 1;
    WEFT_TRY(weft__slurm_root_addr(addr, port, len));
  } else {
    *found = 0;
  }
  return WEFT_SUCCESS;
}

/* An address of the same family and port as *a that accepts on every interface: the node
 * name Slurm lists may resolve to another of this host's addresses than the one peers use. */
static void any_address(weft__sockaddr *a) {
  uint16_t port = weft__sockaddr_port(a);
  int family = a->ss.ss_family;
  memset(a, 0, sizeof(*a));
  a->ss.ss_family = (sa_family_t)family;
  a->len = family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  weft__sockaddr_set_port(a, port);
}

/* Where the secret of a root at an agreed address comes from, most private first:
 * WEFT_SECRET; else a random one rank 0 hands the others through the launcher's PMIx
 * server (use_pmix); else one derived from the launcher's job id and the port, which
 * anyone who can read those (squeue, ps, the port itself) can compute: then rank 0 warns. */
static weft_status_t pick_secret(const launcher_env *which, int rank, const char *port, int use_pmix,
                                 uint8_t secret[16]) {
  const char *text = getenv("WEFT_SECRET");
  if (text != NULL) return parse_secret(text, secret);
  if (use_pmix) {
    if (rank == 0 && getrandom(secret, 16, 0) != 16)
      return weft__error(NULL, WEFT_ERR_SYSTEM, "getrandom failed: %s", strerror(errno));
    return WEFT_SUCCESS; /* the others get it with the id (find_id) */
  }
  derive_secret(secret, which, port);
  const char *job = which->job_var ? getenv(which->job_var) : NULL;
  if (rank == 0)
    WEFT_WARN("the bootstrap secret is derived from %s%s%sthe port %s, which other users can learn: "
              "anyone who reaches the root can join or disturb this job; export WEFT_SECRET=$(openssl "
              "rand -hex 16) to every rank (see README, Security)", job ? which->job_var : "",
              job ? "=" : "", job ? " and " : "", port);
  return WEFT_SUCCESS;
}

/* Builds the id from the agreed root address; rank 0 opens the root there. */
static weft_status_t id_from_root_addr(const launcher_env *which, int rank, const weft__sockaddr *addr,
                                       const char *port, int derived, int use_pmix, weft_unique_id_t *id) {
  weft__id_layout l;
  memset(&l, 0, sizeof(l));
  l.magic = WEFT__ID_MAGIC;
  l.version = WEFT__ID_VERSION;
  WEFT_TRY(pick_secret(which, rank, port, use_pmix, l.secret));
  if (rank == 0) {
    weft__sockaddr bind_addr = *addr;
    if (derived) any_address(&bind_addr);
    int timeout_ms;
    WEFT_TRY(weft__env_timeout_ms(&timeout_ms));
    WEFT_TRY(weft__bootstrap_root_start(&bind_addr, l.secret, timeout_ms));
  }
  weft__id_set_root(&l, addr);
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &l, sizeof(l));
  return WEFT_SUCCESS;
}

static weft_status_t find_id(const launcher_env *which, int rank, int size, const weft_config_t *config,
                             weft_unique_id_t *id) {
  const char *id_str = getenv("WEFT_UNIQUE_ID");
  if (id_str != NULL && strcmp(which->launcher, "weftrun") == 0) return weft_unique_id_from_string(id_str, id);
  weft__sockaddr addr;
  char port[16];
  int derived, found;
  WEFT_TRY(root_addr(which, &addr, port, sizeof(port), &derived, &found));
  int pmix = which->may_pmix && weft__pmix_available(), timeout;
  WEFT_TRY(weft__env_timeout_ms(&timeout));
  if (config != NULL && config->timeout_ms > 0) timeout = config->timeout_ms;
  if (found) {
    /* With PMIx and no WEFT_SECRET, the root's random secret travels through PMIx. */
    int use_pmix = pmix && getenv("WEFT_SECRET") == NULL;
    WEFT_TRY(id_from_root_addr(which, rank, &addr, port, derived, use_pmix, id));
    return use_pmix ? weft__pmix_share_id(rank, size, timeout, rank == 0, id) : WEFT_SUCCESS;
  }
  if (pmix) return weft__pmix_share_id(rank, size, timeout, 0, id);
  return weft__error(NULL, WEFT_ERR_INVALID_USAGE,
                     "rank %d of %d (%s): no way to find the bootstrap root: set WEFT_ROOT_ADDR=host:port, "
                     "or MASTER_ADDR and MASTER_PORT%s", rank, size, which->launcher,
                     which->may_pmix ? ", or launch with PMIx (mpirun, srun --mpi=pmix; weft built with "
                                       "libpmix-dev)" : "");
}

/* Without a launcher: a communicator of one rank, as MPI_Init does in a singleton. */
static weft_status_t init_single(weft_comm_t *comm, const weft_config_t *config) {
  WEFT_WARN("no launcher environment (weftrun, mpirun, srun, torchrun): running as a single rank");
  weft_unique_id_t id;
  WEFT_TRY(weft_get_unique_id(&id));
  return weft_comm_init_rank_config(comm, 1, id, 0, config);
}

weft_status_t weft_comm_init_from_env(weft_comm_t *comm, const weft_config_t *config) {
  if (comm == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "init from the environment: comm is NULL");
  const launcher_env *which;
  int rank = 0, size = 0;
  WEFT_TRY(find_rank_size(&which, &rank, &size));
  if (which == NULL) return init_single(comm, config);
  weft_unique_id_t id;
  WEFT_TRY(find_id(which, rank, size, config, &id));
  return weft_comm_init_rank_config(comm, size, id, rank, config);
}

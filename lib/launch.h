/* launch.h: rendezvous helpers for weft_comm_init_from_env (lib/comm_env.c) that use what a
 * launcher other than weftrun provides: a PMIx server (lib/pmix.c) or Slurm's step layout
 * (lib/launch_slurm.c). */
#ifndef WEFT_LAUNCH_H
#define WEFT_LAUNCH_H
#include <stddef.h>
#include "lib/sockutil.h"
#include "weft.h"

/* Whether this process was started with a PMIx server to talk to (PMIX_RANK and
 * PMIX_NAMESPACE in the environment: Open MPI's mpirun, srun --mpi=pmix) and weft was built
 * with PMIx. */
int weft__pmix_available(void);

/* Exchanges the unique id through PMIx: rank 0 creates it (its process hosts the bootstrap
 * root) unless have_id says its *id is made already (a root opened at an agreed address,
 * whose random secret only PMIx carries), puts it under the key "weft.unique_id", and
 * every rank fences and gets rank 0's.
 * rank and nranks are the launcher's; PMIx's own rank and job size must agree with them.
 * Every wait is bounded by timeout_ms (PMIX_TIMEOUT). Errors: WEFT_ERR_SYSTEM (a PMIx call
 * failed; the message names it and PMIx's error string), WEFT_ERR_INVALID_USAGE (PMIx's
 * rank or size differ from the launcher's), WEFT_ERR_UNSUPPORTED (weft built without PMIx). */
weft_status_t weft__pmix_share_id(int rank, int nranks, int timeout_ms, int have_id, weft_unique_id_t *id);

/* Under srun without PMIx: the bootstrap root's address, agreed without any exchange. The
 * host is the first node of the step (SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST), where
 * Slurm places task 0; the port is 20000 + (job id * 64 + step id) mod 20000, so two steps
 * of a job, and two jobs sharing a node, take different ports (unless they collide modulo
 * 20000, when rank 0 fails with "Address already in use" and WEFT_ROOT_ADDR helps).
 * *port_str receives the port as text (for the secret). Errors: WEFT_ERR_INVALID_USAGE
 * (no node list or job id, or a node list that cannot be read), those of
 * weft__sockaddr_parse. */
weft_status_t weft__slurm_root_addr(weft__sockaddr *addr, char *port_str, size_t port_len);

/* The first host name of a Slurm host list ("node[07-09,12],gpu3" -> "node07") into out.
 * 0, or -1 when the list is malformed or the name does not fit. */
int weft__slurm_first_host(const char *list, char *out, size_t len);
#endif

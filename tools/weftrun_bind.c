/* weftrun_bind.c: weftrun's rank placement.
 *
 * mpirun binds each rank to a core for 2 ranks or fewer and to a package (socket) above
 * that; weftrun does the same by default: on the 2-core VM, eight launches of an unbound
 * 8-byte all-reduce read 0.7-12.3 us (the two ranks' threads shared a core in some launches
 * and not in others), 0.34 us bound in 5 of 6. Ranks fill the allowed CPUs in order, by
 * default each taking n / nranks of them (one when the ranks are as many as the CPUs, as
 * there: a rank's caller thread and stream thread then share its core); --bind-to core
 * gives each one CPU, as mpirun's.
 * When the ranks outnumber the CPUs mpirun binds nothing (--oversubscribe); weftrun binds
 * round-robin instead (rank r on the (r mod n)-th allowed CPU), so every CPU carries the same
 * number of ranks: left to the scheduler, 4 ranks on the 2 cores spent whole seconds with 3 on
 * one CPU and 1 on the other, and a 4-rank all-to-all of 16 B-1 KiB then took 17-18 us per call
 * instead of 10 (3 of 8 unbound launches; pinned 3+1 by hand: 17-18 us at every size; pinned
 * 2+2, any pairing: 9.7-11 us; bound round-robin: 9.7-11 us in 8 of 8 launches). Open MPI's
 * ranks pinned 3+1 slow down alike (18-19 us against 11-13). */
#include "tools/weftrun_bind.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

int weftrun_bind_parse(const char *s) {
  if (strcmp(s, "auto") == 0) return BIND_AUTO;
  if (strcmp(s, "none") == 0) return BIND_NONE;
  if (strcmp(s, "core") == 0) return BIND_CORE;
  if (strcmp(s, "package") == 0 || strcmp(s, "socket") == 0) return BIND_PACKAGE;
  return -1;
}

enum weftrun_bind weftrun_bind_resolve(enum weftrun_bind asked, int nranks, int ncpus) {
  if (asked != BIND_AUTO) return asked;
  if (nranks > ncpus) return BIND_CORE; /* round-robin: the CPUs carry equal shares */
  return nranks <= 2 ? BIND_CORES : BIND_PACKAGE;
}

int weftrun_allowed_cpus(void) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) == 0) return 1;
  return CPU_COUNT(&allowed);
}

/* The package (socket) id of a CPU, from sysfs; -1 when unknown. */
static int package_of(int cpu) {
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
  FILE *f = fopen(path, "r");
  int id = -1;
  if (f != NULL) {
    if (fscanf(f, "%d", &id) != 1) id = -1;
    fclose(f);
  }
  return id;
}

/* The n-th allowed CPU (0-based), or -1. */
static int nth_allowed(const cpu_set_t *allowed, int n) {
  int seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
    if (CPU_ISSET(cpu, allowed) && seen++ == n) return cpu;
  return -1;
}

void weftrun_bind_rank(enum weftrun_bind how, int rank, int nranks) {
  cpu_set_t allowed, set;
  if (how == BIND_NONE || how == BIND_AUTO) return;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) == 0) return;
  /* cores (auto, 2 ranks or fewer): a block of n / nranks CPUs per rank (Open MPI's
   * --map-by slot:PE=k --bind-to core), so that a rank's caller thread and its stream's
   * thread each have a core when there are cores to spare; --bind-to core keeps mpirun's
   * one core per rank. With one core for both, an 8-byte all-reduce of 2 ranks on
   * device buffers took 1.2-1.3 ms on the H200's 16-core host, most likely as the caller
   * spun in cudaStreamSynchronize (CUDA spins when cores outnumber contexts) on the core the
   * stream thread needed (not yet measured again with this binding). */
  int n = CPU_COUNT(&allowed), per = how == BIND_CORES && nranks > 0 && nranks < n ? n / nranks : 1;
  int first = per > 1 ? rank * per : rank % n, cpu = nth_allowed(&allowed, first);
  if (cpu < 0) return;
  CPU_ZERO(&set);
  for (int i = 0; i < per; i++) {
    int c = nth_allowed(&allowed, first + i);
    if (c >= 0) CPU_SET(c, &set);
  }
  int pkg = how == BIND_PACKAGE ? package_of(cpu) : -1;
  for (int c = 0; pkg >= 0 && c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &allowed) && package_of(c) == pkg) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    fprintf(stderr, "weftrun: rank %d: cannot bind to CPU %d%s: %s\n", rank, cpu,
            how == BIND_PACKAGE ? "'s package" : "", strerror(errno));
}

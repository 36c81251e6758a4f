/* weftrun_bind.h: where weftrun places its ranks (see weftrun_bind.c). */
#ifndef WEFTRUN_BIND_H
#define WEFTRUN_BIND_H

/* BIND_CORES is what auto means for 2 ranks or fewer: CPUs / N each (not a --bind-to value) */
enum weftrun_bind { BIND_AUTO, BIND_NONE, BIND_CORE, BIND_PACKAGE, BIND_CORES };

/* "auto", "none", "core", "package" ("socket" is taken for package, as mpirun does); -1
 * for anything else. */
int weftrun_bind_parse(const char *s);

/* The policy auto stands for with nranks ranks on ncpus allowed CPUs, as Open MPI's mpirun
 * decides: cores for 2 ranks or fewer (BIND_CORES: a block of ncpus / nranks each, one when
 * they are as many), package above; core (round-robin) when ranks outnumber the CPUs, where
 * mpirun would bind none. */
enum weftrun_bind weftrun_bind_resolve(enum weftrun_bind asked, int nranks, int ncpus);

/* The number of CPUs this process may run on (its affinity), at least 1. */
int weftrun_allowed_cpus(void);

/* In the child, before exec: pins rank r of nranks as the policy says. core: the (r mod
 * n)-th of the n allowed CPUs (ranks fill the CPUs in order); cores: with fewer ranks than
 * CPUs, the k = n / nranks CPUs from the (r k)-th on, else as core; package widens the
 * rank's first CPU to every allowed CPU of the same package. Failures are reported and the
 * rank runs unbound. */
void weftrun_bind_rank(enum weftrun_bind how, int rank, int nranks);

#endif

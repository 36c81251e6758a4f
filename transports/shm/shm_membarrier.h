/* shm_membarrier.h: the heavy half of an asymmetric fence for the doorbell handshake
 * (shm_doorbell.h), from Linux's membarrier(2).
 *
 * Why: the handshake needs a full fence on both sides: the sender between its data store
 * and its look at `sleeping`, the sleeper between setting `sleeping` and its last look for
 * data. The sender's fence is on the path of every message and, on x86, waits until the
 * data store has left the store buffer, i.e. until the cache line, last read by the peer,
 * is owned again: perf showed it as 75-80% of the LL send of an 8-byte message and
 * about a quarter of a streamed broadcast's time on the 2-vCPU VMs (0.29 against 0.215 us
 * per call without it). membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) makes every CPU that
 * runs a thread of a process registered for it execute a full barrier before it returns.
 * So the sleeper, which is about to make a system call anyway, calls it in place of its
 * fence, and a registered sender needs only a compiler barrier: either the sender's look at
 * `sleeping` comes before the barrier forced on its CPU, and then its earlier data store is
 * visible once membarrier returns (the sleeper's last look finds it), or it comes after,
 * and then it sees the sleeper's `sleeping`, stored before the call (and rings). This is
 * the pattern the membarrier(2) man page gives (replacing a barrier on the fast path by a
 * compiler barrier) and liburcu's "membarrier" flavour uses.
 * Cost: the sleeper pays the call, 0.2 us alone and about 2 us when another registered
 * process runs (an interrupt to its CPU), measured on the 2-vCPU VM; only a rank that is
 * about to sleep (idle for 0.2 ms, lib/task.c) pays it.
 * Both ends must agree: a sender drops its fence toward a peer only when its own process is
 * registered and the peer's doorbell says the peer calls membarrier before it sleeps. */
#ifndef WEFT_SHM_MEMBARRIER_H
#define WEFT_SHM_MEMBARRIER_H

/* Registers this process for MEMBARRIER_CMD_GLOBAL_EXPEDITED, once per process (later
 * calls return the first result; a forked child registers anew). Returns 1 when registered, 0 when the kernel lacks the command (before
 * Linux 4.16), forbids it (seccomp) or failed. Thread-safe. */
int weft__shm_membarrier_register(void);

/* The heavy fence: returns 0, or -1 (errno set) when the call failed; the caller must then
 * not count on it. Only valid after weft__shm_membarrier_register returned 1. Thread-safe. */
int weft__shm_membarrier(void);

#endif

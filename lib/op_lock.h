/* op_lock.h: the communicator's operation lock (comm->lock), held while an operation runs.
 *
 * Why not a pthread mutex: every blocking call takes this lock once, and a small all-reduce
 * costs a few hundred ns. Since the fault-tolerance watcher thread (lib/ft_channel.c) makes
 * every rank's process multi-threaded, glibc's mutex takes its atomic path: a lock and an
 * unlock cost 21 ns together on the development VM (8 ns single-threaded). This lock takes
 * one compare-and-swap and, when nobody waits, releases with a plain store: 11 ns.
 *
 * The word: 0 free, 1 held, 2 held and a thread may sleep on it. The scheme is the futex
 * mutex of U. Drepper, "Futexes Are Tricky" (2011), mutex 2, except for the uncontended
 * release: the holder that reads 1 stores 0 without an atomic exchange. A waiter that marks
 * the word 2 between that read and that store is not woken by the holder; it sleeps at most
 * WEFT__OP_LOCK_NAP_NS and then looks again, so a lost wake costs at most that much and only
 * in that few-instruction race. Contention is rare: the lock is shared only by threads that
 * use one communicator at once (a stream's worker and a blocking call, window registration,
 * a flight-recorder snapshot), and a contended waiter waits for a whole operation anyway.
 *
 * Not recursive; not shared between processes (FUTEX_PRIVATE would do; the shared form of
 * lib/futex.h is used only to keep one futex wrapper). Thread safety: that is its purpose. */
#ifndef WEFT_OP_LOCK_H
#define WEFT_OP_LOCK_H
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include "lib/futex.h"

typedef struct {
  _Atomic uint32_t word;
} weft__op_lock;

enum { WEFT__OP_LOCK_SPINS = 64 };
#define WEFT__OP_LOCK_NAP_NS 1000000ull /* 1 ms: the longest a lost wake can cost */

static inline void weft__op_lock_init(weft__op_lock *l) { atomic_init(&l->word, 0); }

/* Returns 1 when it took the lock, 0 when another thread holds it. */
static inline int weft__op_lock_try(weft__op_lock *l) {
  uint32_t free_word = 0;
  return atomic_compare_exchange_strong_explicit(&l->word, &free_word, 1, memory_order_acquire,
                                                 memory_order_relaxed);
}

/* The contended path: yields a few times, then sleeps on the futex (marking the word 2). */
static inline void weft__op_lock_slow(weft__op_lock *l) {
  for (int i = 0; i < WEFT__OP_LOCK_SPINS; i++) {
    if (atomic_load_explicit(&l->word, memory_order_relaxed) == 0 && weft__op_lock_try(l)) return;
    sched_yield();
  }
  while (atomic_exchange_explicit(&l->word, 2, memory_order_acquire) != 0)
    weft__futex_wait(&l->word, 2, WEFT__OP_LOCK_NAP_NS);
}

/* Takes the lock; blocks (yielding, then sleeping) while another thread holds it. */
static inline void weft__op_lock_take(weft__op_lock *l) {
  if (!weft__op_lock_try(l)) weft__op_lock_slow(l);
}

/* Releases the lock; the caller holds it. Wakes sleepers when the word says there are. */
static inline void weft__op_lock_release(weft__op_lock *l) {
  if (atomic_load_explicit(&l->word, memory_order_relaxed) == 1) {
    atomic_store_explicit(&l->word, 0, memory_order_release);
    return;
  }
  atomic_store_explicit(&l->word, 0, memory_order_release);
  weft__futex_wake(&l->word);
}
#endif

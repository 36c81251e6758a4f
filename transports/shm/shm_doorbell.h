/* shm_doorbell.h: how a rank that waits on shared memory sleeps, and how a peer wakes it.
 *
 * Each rank's segment starts with its doorbell line: `sleeping`, set by the owner while it
 * sleeps, and `bell`, the futex word it sleeps on. The owner sets sleeping, fences, reads
 * bell, looks once more for work and only then calls FUTEX_WAIT(bell); a peer that has
 * just published something the owner may wait for (data, a freed slot, an LL credit)
 * loads `sleeping` and only when it is set bumps `bell` and calls FUTEX_WAKE. The fast
 * path of a send is therefore one full fence and one load of a line that stays shared in
 * the sender's cache: no system call.
 *
 * The fence is what makes this a correct Dekker handshake: each side stores (data, or
 * `sleeping`), fences, then loads the other's word, so at least one of them sees the
 * other's store: the owner finds the data in its last look, or the peer finds `sleeping`
 * set and rings. Without it, x86 lets the peer's load of `sleeping` pass its still-buffered
 * data store; both then miss each other and the owner sleeps until its bounded sleep
 * (WEFT__SHM_SLEEP_MAX_NS) ends: measured as 1 ms stalls that made a 2-rank 2 MiB
 * all-reduce take 1010 us instead of ~150. A fence costs ~20 ns, once per message. The
 * bounded sleep stays as a second line of defence.
 *
 * Where the kernel allows it, the fence moves off the send path: a sleeper whose doorbell
 * says `membarrier` calls membarrier(2) in place of its fence, and a sender registered for
 * it (shm_membarrier.h) then rings that doorbell with a compiler barrier only (the
 * connection's ring_fence is 0). WEFT_SHM_MEMBARRIER=0 keeps the fences on both sides.
 *
 * `yielding`, on a line of its own, is set by the owner around each sched_yield: with more
 * ranks than cores a peer that waits for the owner's small message spins only while the
 * owner holds its CPU (lib/task.c). Its own line because the owner writes it around every
 * yield, and peers load the bell's line on every send. */
#ifndef WEFT_SHM_DOORBELL_H
#define WEFT_SHM_DOORBELL_H
#include <stdatomic.h>
#include <stdint.h>
#include "lib/futex.h"
#include "transports/shm/shm_fifo.h"

typedef struct {
  _Alignas(WEFT__SHM_LINE) _Atomic uint32_t bell; /* futex word, bumped by whoever wakes us */
  _Atomic uint32_t sleeping;                      /* 1 while the owner sleeps or is about to */
  uint32_t membarrier; /* set before any peer maps the segment, never changed: 1 when the
                          owner calls membarrier(2) instead of its fence before it sleeps */
  _Alignas(WEFT__SHM_LINE) _Atomic uint32_t yielding; /* 1 while the owner is in sched_yield */
} weft__shm_doorbell;

_Static_assert(sizeof(weft__shm_doorbell) <= WEFT__SHM_SEG_HEADER, "doorbell fits the header");

/* Wakes the owner of d if it announced that it sleeps. fence: 0 only when d's owner calls
 * membarrier before it sleeps and this process is registered for it (see above). */
static inline void weft__shm_ring(weft__shm_doorbell *d, int fence) {
  if (d == NULL) return;
  if (fence) atomic_thread_fence(memory_order_seq_cst); /* our data store before our look */
  else atomic_signal_fence(memory_order_seq_cst);       /* the compiler's order is enough */
  if (!atomic_load_explicit(&d->sleeping, memory_order_relaxed)) return;
  atomic_fetch_add_explicit(&d->bell, 1, memory_order_release);
  weft__futex_wake(&d->bell);
}
#endif

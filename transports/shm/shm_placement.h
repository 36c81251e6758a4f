/* shm_placement.h: whether this rank and a shm peer share a last-level cache, measured, and
 * how the bulk FIFO writes large payloads because of it.
 *
 * Why: a FIFO payload written with ordinary stores stays in the writer's cache, and the
 * reader pulls it from there. Within one L3 that is the fastest path there is. Across two
 * L3s (two sockets, or two CCDs of one EPYC) every line crosses the interconnect as a
 * dirty-line transfer, which measured 4-5x slower than reading memory. On the 2-core
 * development VM the two vCPUs move between both placements every few seconds or minutes,
 * and the guest cannot see it (hwloc shows one 32 MiB L3). 2-rank all-reduce 256 KiB-16 MiB,
 * busbw in GB/s, median launch (the same build, launches interleaved, perf/l3_probe before
 * and after each):
 *                           ordinary stores   non-temporal stores
 *   shared L3 (60-100 ns)   10-17             5.6-7.6
 *   split L3s (320-380 ns)  1.6-2.3           7.0-11.9
 * So the writer measures the placement and, across L3s, writes payloads of at least
 * WEFT__SHM_NT_MIN bytes past its cache (weft__nt_copy): the lines go to memory and the
 * reader reads them from there.
 *
 * The measurement: a ping-pong on the FIFO's probe line (a round trip is two cache-line
 * transfers between the two cores): one untimed round trip, then 5 batches of 8, each timed
 * as a whole; the fastest batch's mean round trip above WEFT__SHM_SPLIT_NS says two L3s
 * (the VM measured 55-70 ns with one L3 and 270-380 with two; perf/l3_probe agrees).
 * The probe needs both ranks at once, so it runs at points all ranks reach in the same
 * order: at the start of the first collective of uniform sizes with >= WEFT__SHM_PROBE_FIRST_MIN
 * bytes per rank (WEFT__SHM_NT_MIN: from there the placement decides how payloads are
 * written. It was 8 KiB, the single-copy floor, and a program whose calls were all 2-8 KiB
 * never probed, so on two L3s it wrote them through the cache: 1.3-4.4x slower at 4 KiB by
 * WEFT__SHM_NT_MIN's table. Before that, a program whose first calls were small kept the
 * guesses until its first large call, and on the AMD VM 16-64 KiB all-gather ran 1.5-2x
 * slower on them), at the first large one
 * (>= WEFT__SHM_PROBE_MIN bytes per rank), again once at least WEFT__SHM_PROBE_EVERY large
 * ones and WEFT__SHM_PROBE_EVERY_BYTES of them (summed) have run since the last, and after
 * WEFT__SHM_PROBE_EVERY_SMALL smaller ones since the last probe (weft__shm_probe_due): a program of
 * small calls otherwise kept its first verdict for good, while the host moved the VM's vCPUs
 * between one L3 and two every few minutes. Each rank initiates toward
 * its ring successor (whose FIFO it writes most) and answers its ring predecessor, in two
 * or three phases so that no rank does both at once. After the round trips each pair runs
 * the copy probe (shm_copy_probe.h) on the same line. When ranks outnumber cores (4 ranks
 * on the VM's 2) round trips between two ranks that share a CPU would each be a context
 * switch and say nothing about caches, so only ring neighbours bound to two different CPUs
 * take them, one pair at a time along the ring while the others wait (yielding their CPU to
 * the pair: both of it must be running), the responder timing its answers too; the
 * placement then holds for every connection between those two CPUs (the all-to-all's and
 * the broadcast's too), and a connection to a rank on our own CPU writes through the cache.
 * Before, such ranks never timed anything and wrote through the cache on two L3s as well:
 * 4 ranks bound round-robin on the VM's 2 vCPUs, alternating launches whose l3_probe read
 * two L3s at 600-1200 ns (the host's slow state), per call: all-reduce 16 MiB 15.6-19.5
 * ms against 6.0-8.3 with the probe, all-gather 64 MiB 31-36 against 12-14, all-to-all 64
 * MiB 43-55 against 13-19; where the probe finds one L3, unchanged. Cost: a re-probe (the
 * schedule above) kept the slowest rank 0.2-0.3 ms. Unbound ranks (no CPU of their own)
 * still only meet for the copy probe, and only at the first.
 *
 * WEFT_SHM_NT_COPY (formerly WEFT_SHM_STREAM, still read): auto (default, the probe
 * decides), 1 (always write payloads of at least WEFT__SHM_NT_MIN bytes with non-temporal
 * stores), 0 (never). Read at setup. Each rank decides only how it
 * writes, so ranks may differ; every rank takes part in the probes whatever its setting,
 * because its partners cannot know it. */
#ifndef WEFT_SHM_PLACEMENT_H
#define WEFT_SHM_PLACEMENT_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "weft.h"

struct weft__task;

enum { WEFT__SHM_NT_NEVER = 0, WEFT__SHM_NT_ALWAYS = 1, WEFT__SHM_NT_AUTO = 2 };

/* Payloads bypass the cache from this size (bytes), where the placement says two L3s (or
 * WEFT_SHM_NT_COPY=1). It was 64 KiB, and on two L3s the messages below it ran 3-4x slower
 * than on one. AMD EPYC (Zen 4) VM, 2 ranks bound, launches whose probes both said two L3s,
 * 22 each, alternating 64 KiB and 2 KiB (us per call, out of place, medians; total sizes):
 *                   4 KiB        16 KiB        64 KiB
 *   all-reduce      2.71 -> 1.35  11.75 -> 2.85  39.45 -> 9.28
 *   all-gather      1.58 -> 1.17   5.08 -> 1.83  19.96 -> 5.13
 *   all-to-all      1.57 -> 1.19   5.14 -> 1.89  19.88 -> 4.98
 *   broadcast       2.67 -> 0.61  10.05 -> 1.37  (32 KiB 17.85 -> 2.48)
 *   reduce-scatter  1.50 -> 1.14   5.24 -> 1.76  19.95 -> 4.96
 * which is about what one L3 runs (16 KiB: 1.5-2.9 us). At 1 KiB messages non-temporal
 * stores were slower (all-gather of 2 KiB: 1.02 against 1.18 us, 25-28 launches); messages
 * of up to WEFT_LL_THRESHOLD (512 B) go LL anyway. */
#define WEFT__SHM_NT_MIN (2u * 1024u)

/* 1 when a sender whose connection has nt_out (set by the probe or WEFT_SHM_NT_COPY) writes
 * a payload of a `bytes`-byte message with non-temporal stores: shm.c's sends, and the copy
 * probe, which times a send as it is written. Pure; thread-safe. */
static inline int weft__shm_payload_nt(int nt_out, size_t bytes) {
  return nt_out && bytes >= WEFT__SHM_NT_MIN;
}
#define WEFT__SHM_PROBE_FIRST_MIN WEFT__SHM_NT_MIN /* the first collective of this many bytes per rank probes */
#define WEFT__SHM_PROBE_MIN (256u * 1024u)   /* collectives of this many bytes per rank probe */
#define WEFT__SHM_PROBE_EVERY 16             /* ... the first, then after 16 more ... */
/* ... that moved this many bytes (per rank, summed) since the last probe. A probe (41 round
 * trips and the copy probe's three 256 KiB copies) costs ~100 us; every 16th call alone
 * charged each 2-rank broadcast of 256 KiB ~6 us of it (bench: 19-22 us per call against
 * 11-13 in longer runs). 256 MiB keeps calls of 16 MiB and more on every 16th, as before;
 * smaller ones probe once per 256 MiB moved (a 256 KiB call: every 1024th, ~12 ms apart). */
#define WEFT__SHM_PROBE_EVERY_BYTES ((uint64_t)256 << 20)
/* Collectives of WEFT__SHM_PROBE_FIRST_MIN to WEFT__SHM_PROBE_MIN bytes per rank probe again
 * after this many of them since the last probe of any size. Why: on two L3s the verdict
 * decides 2-64 KiB calls' speed (WEFT__SHM_NT_MIN's table: a 4 KiB all-reduce 2.71 us
 * through the cache against 1.35 past it), on one L3 writing past the cache is the slower
 * way (the first table above), and a program of such calls never reaches the large calls'
 * schedule. Cost: the round trips (41, 55-380 ns each) and the copy probe's rendezvous (it
 * reruns only when the verdict changed). Built with a probe every 64th call, 2-rank 2-4 KiB
 * all-reduces ran 0.16-0.6 us a call slower (6 alternating launches, one L3 and two): 10-38
 * us a probe, so under 0.001 us a call at every 65536th (85 ms or more of 2 KiB calls). */
#define WEFT__SHM_PROBE_EVERY_SMALL 65536u
#define WEFT__SHM_PROBE_BATCHES 5            /* timed batches of round trips per probe ... */
#define WEFT__SHM_PROBE_BATCH_TRIPS 8        /* ... of this many each */
#define WEFT__SHM_SPLIT_NS 180               /* the fastest batch's mean above this: two L3s */

/* The probe schedule above, for a collective of `bytes` per rank (at least
 * WEFT__SHM_PROBE_FIRST_MIN) that every rank of the communicator makes in the same order: 1
 * when it must probe. `probes`: the probes run so far; *large: the large collectives
 * (>= WEFT__SHM_PROBE_MIN) so far, *since_calls and *since_bytes: their number and bytes
 * since the last large one that probed, *since_small: the smaller ones since the last probe;
 * updated here (zero them once). Pure (no clock, no I/O), so every rank decides alike. Not
 * thread-safe on the same counters. */
static inline int weft__shm_probe_due(uint64_t probes, uint64_t *large, uint64_t *since_calls,
                                      uint64_t *since_bytes, uint64_t *since_small, size_t bytes) {
  int due = probes == 0; /* the first collective of WEFT__SHM_PROBE_FIRST_MIN bytes */
  if (bytes < WEFT__SHM_PROBE_MIN) {
    if (++*since_small >= WEFT__SHM_PROBE_EVERY_SMALL) due = 1;
    if (due) *since_small = 0;
    return due;
  }
  if ((*large)++ == 0) {
    due = 1;
  } else {
    *since_calls += 1;
    *since_bytes += bytes;
    if (*since_calls >= WEFT__SHM_PROBE_EVERY && *since_bytes >= WEFT__SHM_PROBE_EVERY_BYTES) due = 1;
  }
  if (due) *since_calls = *since_bytes = *since_small = 0;
  return due;
}

/* WEFT_SHM_NT_COPY as a WEFT__SHM_NT_* mode (unknown values: auto, with a warning). */
int weft__shm_nt_mode(void);

/* The transport's before_collective (WEFT__TRANSPORT_CAP_PLACEMENT): every rank calls it
 * before each collective starts (lib/task.c). When the schedule above
 * says so, runs the probe with the ring successor and predecessor over shm and sets
 * nt_out and peer_rt_ns of the successor's connection (with more ranks than cores, of
 * every connection to a rank on a CPU it timed), then the copy probe (its copy_verdict);
 * otherwise returns at once. Blocks until the
 * partners join, at most the communicator's timeout: WEFT_ERR_TIMEOUT naming the rank and
 * peer; within a few ms of a partner's death (its process gone, or the root's notice)
 * WEFT_ERR_REMOTE naming it, and of weft_comm_abort from another thread WEFT_ERR_ABORTED.
 * Waits longer than 2 ms sleep rather than spin. Caller holds comm->lock. Not thread-safe
 * per communicator. */
weft_status_t weft__shm_placement_check(struct weft__task *t);

/* A probe line's value: the probe's generation (the same on every rank) and its step. */
static inline uint64_t weft__shm_probe_word(uint64_t gen, uint64_t step) { return gen << 32 | step; }

/* Waits until *line holds value, with the probe's deadline, liveness checks and waiting
 * policy (spins, then yields, then sleeps; errors as weft__shm_placement_check's, naming
 * peer). For the steps that follow the round trips (shm_copy_probe.h). */
weft_status_t weft__shm_probe_await(struct weft_comm *comm, _Atomic uint64_t *line, uint64_t value, int peer);
#endif

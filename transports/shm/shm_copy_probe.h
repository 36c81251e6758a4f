/* shm_copy_probe.h: which of the shm transport's two paths moves bytes to a peer faster on
 * this machine, measured on the real path: one copy (the peer reads our buffer with
 * process_vm_readv) or two (we copy into its FIFO, it copies out).
 *
 * Why: the guesses in lib/req.c were measured on one machine and lose on another. On the
 * Intel VM single copy won all-gather and all-to-all 1.3-2.2x; on the AMD EPYC VM (two
 * CCDs, 440-490 ns cache-line round trips) process_vm_readv read a peer's freshly written
 * 256 KiB at 12-18 GB/s where memcpy out of a shared mapping read 33-49, and two copies ran
 * all-gather 1.4-2.5x, all-to-all 1.1-1.6x and broadcast 1.4-2.2x faster (README,
 * WEFT_SHM_CMA_BYTES). Neither the round trip nor the CPU's vendor tells the two apart; the
 * kernel's copy against two user-space copies between these two cores does.
 *
 * The measurement, after the placement probe's round trips (shm_placement.h), between a
 * rank and its ring successor, for two message sizes (WEFT__SHM_COPY_PROBE_SMALL_BYTES for
 * messages below 64 KiB, WEFT__SHM_COPY_PROBE_BYTES for the rest: lib/req.c says why),
 * each in two states (a message freshly produced, then the same message sent again): the
 * small one after a round not counted, WEFT__SHM_COPY_PROBE_SMALL_REPEATS times in each
 * state, each time's median kept; the large one WEFT__SHM_COPY_PROBE_REPEATS times in
 * each, the fastest kept (weft__shm_rounds_verdict says why):
 *   sender    writes the round's message into its private buffer (a fresh message; a
 *             message sent again is left as the previous round sent it), times copying
 *             it into the successor's FIFO payload as a message of that size would be
 *             (non-temporal stores when nt_out and it is at least WEFT__SHM_NT_MIN),
 *             publishes the buffer's address;
 *   receiver  times copying the payload out of the FIFO, then reading the sender's buffer
 *             by process_vm_readv, into one private buffer, and answers with both times.
 * The sender keeps for its messages to that peer: one copy for calls where both sides
 * send (all-gather, all-to-all: each core does its copy in and its copy out) when the read
 * took less than copy-in plus copy-out; for one-way calls (broadcast: the two copies
 * overlap on two cores) when less than the slower of the two; both by a margin
 * (weft__shm_copy_verdict), each size for its own messages, from both states by
 * weft__shm_two_state_verdict (why both: there). The payload area is used
 * only when the FIFO is empty (every earlier message received), and is not published:
 * the next message overwrites it.
 * When: at the first placement probe, and again only when the probe's placement verdict
 * changed (nt_out); with more ranks than cores once, at the first. Skipped, the sender
 * says so and both go on at once. Cost on the AMD VM: a run (three 256 KiB rounds each way
 * then, six since the second read; the caches it leaves cold) made the calls around it
 * ~600 us slower in all, which as a periodic re-run (every 8th probe, 128 large calls) cost
 * a 2 MiB all-gather 20-30 us a call over those calls; hence no periodic run. Where the
 * host moves the vCPUs often, the placement verdict changes often too: on the Intel VM of
 * 2026-12-02 up to ten verdicts in one perf-tool launch. On the Intel VM of 2026-12-03 a
 * run took 0.4-0.65 ms: the eleven 16 KiB rounds 81-155 us, the six 256 KiB rounds 317-498.
 * The verdict of the measured connection also serves this rank's other shm connections
 * until they are measured themselves (the ring's neighbours are the only ones probed).
 * The receiver gets the sender's copy-in times too, so it holds the sender's verdict as
 * well (copy_verdict_back); where both directions of a pair were measured (two ranks: each
 * is the other's successor), one copy needs both verdicts (weft__shm_pair_verdict). */
#ifndef WEFT_SHM_COPY_PROBE_H
#define WEFT_SHM_COPY_PROBE_H
#include <stdint.h>
#include "weft.h"
#include "transports/shm/shm_conn.h"
#include "transports/shm/shm_state.h"

#define WEFT__SHM_COPY_PROBE_BYTES (256u * 1024u) /* the test message (bytes) ... */
#define WEFT__SHM_COPY_PROBE_MIN_BYTES (64u * 1024u) /* ... at least this much FIFO payload */
#define WEFT__SHM_COPY_PROBE_SMALL_BYTES (16u * 1024u) /* the small class's test message */
#define WEFT__SHM_COPY_PROBE_REPEATS 3 /* rounds of each state of the large message ... */
#define WEFT__SHM_COPY_PROBE_SMALL_REPEATS 5 /* ... and of the small one, after one round not counted */
/* Rounds: the small message once uncounted, SMALL_REPEATS fresh, SMALL_REPEATS sent again,
 * then the large one REPEATS fresh, REPEATS sent again; two probe-line steps each. */
#define WEFT__SHM_COPY_PROBE_ROUNDS (1 + 2 * WEFT__SHM_COPY_PROBE_SMALL_REPEATS + 2 * WEFT__SHM_COPY_PROBE_REPEATS)
#define WEFT__SHM_COPY_PROBE_STEPS (2 * WEFT__SHM_COPY_PROBE_ROUNDS) /* probe-line steps it takes */

/* The verdict from one measurement (ns, fastest of the rounds): WEFT__SINGLE_COPY_MEASURED,
 * plus WEFT__SINGLE_COPY_TWO_WAY when the read beat copy-in plus copy-out and
 * WEFT__SINGLE_COPY_ONE_WAY when it beat the slower of the two, each by the margin below.
 * Why a margin: the two mistakes cost unequally. On the AMD EPYC VM one launch in eight
 * measured the read (19.5 us) just under copy-in plus copy-out and ran all-gather on one
 * copy: 16 MiB 1497 us per call against 797-841 in the other launches, 64 MiB 7832 against
 * 5095-5696; a machine where one copy wins by less than the margin loses at most that
 * much on two copies. Pure; thread-safe. */
#define WEFT__SHM_COPY_PROBE_MARGIN_PCT 20 /* one copy must be this much faster (percent) */
unsigned weft__shm_copy_verdict(uint32_t in_ns, uint32_t out_ns, uint32_t read_ns);

/* One size's verdict, from its copy-in and copy-out (ns, fastest of all its rounds)
 * and two reads: of a message just written (fresh_read_ns: its lines dirty in the sender's
 * private cache) and of the same message sent again (again_read_ns: the perf tools'
 * buffers, a buffer gathered or sent once more). WEFT__SINGLE_COPY_TWO_WAY from the read
 * of a message sent again (weft__shm_copy_verdict), kept only if the fresh read did not lose
 * to copy-in plus copy-out by more than WEFT__SHM_COPY_PROBE_FRESH_LOSS_PCT;
 * WEFT__SINGLE_COPY_ONE_WAY from the fresh read alone, as before: with one-way also from the
 * second read, a 2-rank broadcast of 128 KiB-1 MiB ran 1.0-1.8x slower on that VM (3
 * interleaved rounds, in place; there the second read, 13-16 us, came within 20% of the
 * slower copy, 14-16). (Broadcasts of 256 KiB to 1 MiB take the two-way bit too, and from
 * 64 KiB WEFT__SINGLE_COPY_AGAIN_ONE_WAY, the second read against the slower copy by 30%,
 * which that VM's never met: lib/req.c says why.)
 * Why both: the two reads differ by 2x on some machines, and which state users' messages
 * are in varies. On the Intel VM (family 6 model 207) a 256 KiB read took 25-27 us fresh,
 * about copy-in plus copy-out (11-15 + 14-16), and 13-16 us sent again, where the copies
 * took the same: measured fresh alone, the probe chose two copies, and all-gather and
 * all-to-all (perf tools, 2 ranks, 64 KiB-16 MiB) then ran 1.3-2.5x slower than on one copy
 * and 0.5-0.9x Open MPI. On the AMD EPYC VMs a fresh read ran at 12-18 GB/s against 33-49
 * for a copy out of the FIFO (above; Zen 4: 21.7 us against 11.1 + 5.7), more than the loss
 * allowed, so two copies stay there whatever the second read says (untested there since:
 * no AMD VM in the session that made this change). Pure; thread-safe. */
#define WEFT__SHM_COPY_PROBE_FRESH_LOSS_PCT 25
/* With WEFT__SINGLE_COPY_TWO_WAY, WEFT__SINGLE_COPY_AGAIN_ONE_WAY when the read of the message
 * sent again beat the slower copy by this margin (percent; lib/req.c says why 30). */
#define WEFT__SHM_COPY_PROBE_AGAIN_MARGIN_PCT 30
unsigned weft__shm_two_state_verdict(uint32_t in_ns, uint32_t out_ns, uint32_t fresh_read_ns, uint32_t again_read_ns);

/* One state of one size's rounds as the probe measured them (ns): copy-in, copy-out, read. */
typedef struct weft__shm_probe_rounds {
  uint32_t in[WEFT__SHM_COPY_PROBE_SMALL_REPEATS], out[WEFT__SHM_COPY_PROBE_SMALL_REPEATS];
  uint32_t read[WEFT__SHM_COPY_PROBE_SMALL_REPEATS];
  int n; /* rounds kept, at most WEFT__SHM_COPY_PROBE_SMALL_REPEATS */
} weft__shm_probe_rounds;
_Static_assert(WEFT__SHM_COPY_PROBE_SMALL_REPEATS >= WEFT__SHM_COPY_PROBE_REPEATS, "rounds of either size fit");

/* One size's verdict (weft__shm_two_state_verdict) from its rounds fresh and sent again: each
 * state's times the median of its rounds (median != 0: the small size) or the fastest (the
 * large size), copy-in and copy-out the faster of the two states' (the same work in both).
 * A state without rounds counts as UINT32_MAX each (two copies). Why medians for the small
 * size: its copies take about 1 us, and which round is fastest is chance. On the Intel VM
 * (family 6 model 167) of 2026-12-03, in one launch's fresh rounds the copy-in of 16 KiB
 * took 0.56 us once and 1.25-1.43 the other times, the copy-out 1.63-1.64, the read 3.73
 * once and 2.63-2.77 the others. The fastest of three rounds per state (as the probe had it,
 * the first round cold: 1.06 in, 10.5 out, 6.3 read; not counted now) put the fresh read at
 * 1.27x copy-in plus copy-out, past the 25% allowed, and the pair took two copies below
 * 64 KiB in 1 of 16 to 6 of 12 launches, whose 32 KiB all-to-all (perf tools) then ran
 * 1.5x slower (3.3 against 2.0-2.3 us per call). The medians put that read at 1.10x; 24
 * probes in 12 launches measured 0.94-1.21x, and a program that rewrites its send buffer
 * before each call lost 10-18% on one copy at 16-32 KiB (perf/bench/RESULTS.md). The large
 * size's copies take 11-14 us and vary by under 5% after its first round, which the
 * fastest skips. Pure; thread-safe. */
unsigned weft__shm_rounds_verdict(const weft__shm_probe_rounds *fresh, const weft__shm_probe_rounds *again,
                                  int median);

/* The verdict for our sends to a peer: ours for that direction, except that where the peer's
 * verdict for its sends to us was measured too (back), a one-copy bit stays only if both
 * have it. Why: on the Zen 4 VM a slow copy-in at the probe (23.5 us against 5.6 out and a
 * 21.6 us read; 19.8 + 5.7 against 20.9) tipped one direction of a 2-rank pair to one copy
 * in 2 of 8 launches, the other direction measuring two copies (0 of 16 launches an hour
 * later: it comes and goes with the host). One direction on one copy (WEFT_SHM_CMA_CALLS=all
 * on rank 1 only) ran all-gather 1.4-2x slower than both on two copies (4 alternating pairs
 * of launches, us per call: 256K 17.4-19.6 / 10.1-17.2, 1M 70.8-79.0 / 37.7-56.3, 4M
 * 312-326 / 174-235). The copies through the FIFO are the same work both ways, so a
 * disagreement is noise, and the cheaper mistake is two copies (the margin's reasoning
 * above). Pure; thread-safe. */
unsigned weft__shm_pair_verdict(unsigned ours, unsigned back);
/* With more ranks than cores, the verdict that serves all of a rank's shm connections: the
 * one measured between two CPUs. The rank on own_cpu measured its sends to its ring
 * successor on next_cpu (to_next) and holds its predecessor's verdict for the sends from
 * prev_cpu (from_prev); a CPU of -1 is a rank not bound to one CPU, a verdict without
 * WEFT__SINGLE_COPY_MEASURED was not measured. Returns to_next where its successor sits on
 * another CPU, else from_prev where the predecessor does, else 0 (none: each connection
 * keeps its own). Why: two ranks on one CPU share its caches, and the probe between them
 * timed a 256 KiB message in L2 where two copies and a read cost the same (Intel VM of
 * 2026-12-03: copy-in 4.6 us, copy-out 4.6, read 8.1-8.6), so it chose two copies; but in
 * a collective those ranks take turns on the core, two copies do each byte's work twice on
 * it and the FIFO's lines crowd its L2. 4 ranks on 2 cores there, the probe between CPUs
 * saying one copy, out of place, us per call, 2 launches each, the pairs' own verdicts
 * against one copy on every pair (WEFT_SHM_CMA_CALLS=all): all-to-all 512K 102-116 / 69,
 * 2M 474-501 / 384-396, 8M 1963-2013 / 1534-1566; all-gather 1M 202 / 156-168, 4M
 * 1040-1054 / 831-850, 16M 4482-4592 / 3937-3976. On the AMD EPYC VMs the probe between CPUs said two copies and two
 * copies won with more ranks than cores as well (lib/req.c), which this keeps. Pure;
 * thread-safe. */
unsigned weft__shm_cpu_verdict(int own_cpu, int next_cpu, unsigned to_next, int prev_cpu, unsigned from_prev);

/* The sender's side toward its ring successor `peer` over `to`, on the placement probe's
 * line after step first_step of probe generation gen: runs the measurement when due (see
 * above; `split` is the placement verdict just measured) and sets to->copy_verdict (the
 * large size's verdict, with the small size's as WEFT__SINGLE_COPY_SMALL_*), or
 * tells the peer it is skipped. Blocks until the peer answers, at most the communicator's
 * timeout (WEFT_ERR_TIMEOUT naming rank and peer), WEFT_ERR_REMOTE within a few ms of the
 * peer's death, WEFT_ERR_ABORTED on weft_comm_abort; WEFT_ERR_SYSTEM when the buffer cannot
 * be allocated. Caller holds comm->lock. */
weft_status_t weft__shm_copy_probe_send(struct weft_comm *comm, weft__shm_state *st, weft__shm_conn *to,
                                        int peer, uint64_t gen, uint32_t first_step, int split);
/* The receiver's side from its ring predecessor `peer` over `from`: waits for the sender's
 * first step, then measures and answers each round, or returns when the sender skipped.
 * Errors as weft__shm_copy_probe_send's. Caller holds comm->lock. */
weft_status_t weft__shm_copy_probe_answer(struct weft_comm *comm, weft__shm_state *st, weft__shm_conn *from,
                                          int peer, uint64_t gen, uint32_t first_step);
#endif

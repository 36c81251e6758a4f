/* req.c: request queues per connection and the progress pass over a communicator. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/status.h"
#include "lib/req.h"
#include "lib/task.h"
#include "mem/space.h"
#include "transports/transport.h"

/* A copy of a blank request, not memset: GCC makes a 128-byte memset `rep stosq`, whose
 * start-up was 5% of the samples of an 8-byte broadcast's receiver (perf); the copy
 * becomes plain vector loads and stores. */
static const weft__req blank_req;

void weft__req_init_send(weft__req *r, const weft__mem_space *mem, const void *src, size_t bytes) {
  *r = blank_req;
  r->kind = WEFT__REQ_SEND;
  r->mem = mem;
  r->src = src;
  r->bytes = bytes;
}

void weft__req_init_recv(weft__req *r, const weft__mem_space *mem, void *dst, const void *acc, size_t bytes,
                         weft_datatype_t dt, weft_redop_t op) {
  *r = blank_req;
  r->kind = WEFT__REQ_RECV;
  r->mem = mem;
  r->dst = dst;
  r->acc = acc;
  r->bytes = bytes;
  r->dtype = dt;
  r->op = op;
}

/* Measured with perf/compare (3 alternating rounds; single copy from 64 KiB messages on
 * against off; busbw ratio one copy / two copies). 2 ranks bound to the 2 cores: all-gather
 * 1.26-2.16 at 128K-32M, 1.03-1.13 at 64M-256M; all-to-all 1.30-2.21 at 128K-32M,
 * 1.15-1.19 at 64M-256M; all-reduce 0.52-0.88 at 128K-256M (into the reducing scratch);
 * broadcast 1.31-1.64 at 128K-1M but 0.70-0.90 at 16M-256M, and on the earlier VM
 * (shm_setup.c) it lost at every size from 128 KiB: one-way traffic stays on two copies.
 * 4 ranks on 2 cores: all-gather 1.11-1.36 at 512K-16M, 0.78-0.85 at 32M-256M;
 * all-to-all 1.12-1.33 at 256K-32M, 0.80-0.96 at 64M-256M (broadcast, on two copies in both
 * runs, read 0.72-1.03 there: the noise of that sweep).
 * Broadcast by where the cores are (2 ranks, in-place time per call in us, two copies /
 * one copy, 6 alternating launches, perf/l3_probe's round trip before each): at 150-160 ns
 * 128K 8.7-9.0 / 7.5-9.9, 256K 18.7-22.8 / 14.9-18.2, 512K 42.9-50.3 / 29.2-36.7, 1M
 * 84.3-97.4 / 77.0-102.3, 2M 185-218 / 229-282; at 214 ns the same (256K 22.2 / 18.1). The
 * earlier VM, whose two copies through one fast L3 reached 10-18 GB/s, lost it at every
 * size: there the FIFO's lines stay in the shared cache (60-100 ns round trips, the
 * placement header's table). Hence one copy from 100 ns, up to 1 MiB. */
enum { OVERSUBSCRIBED_SINGLE_COPY_MAX_BYTES = 16 << 20 };
/* 8-64 KiB messages (the transport's floor is 8 KiB: transports/shm/shm_setup.c), in-call
 * time in us, 2 ranks bound to the 2 cores, medians of 5 alternating launches, floor 64 KiB /
 * 8 KiB (nccl-tests sizes: the whole buffer, messages of half of it): out-of-place
 * all-gather 16K 3.56 / 2.83, 32K 4.19 / 3.75, 64K 8.01 / 5.52; all-to-all 16K 3.32 / 2.77,
 * 32K 4.64 / 3.63, 64K 7.03 / 5.48. But in-place all-to-all, whose sends come from the
 * staged copy this core has just written (and the peer read the call before), lost: 32K
 * 5.35 / 7.93, 64K 8.84 / 13.20; and 4 ranks on 2 cores (7 launches) all-gather 16K 13.8 /
 * 19.8, 32K 23.4 / 30.6, 64K 30.9 / 40.0. Broadcast between far cores: a tie (16K 2.57 /
 * 2.71, 64K 5.94 / 5.61). Hence below 64 KiB only the first two. */
enum { SINGLE_COPY_SMALL_BYTES = 64 << 10 };
enum { BROADCAST_SINGLE_COPY_MIN_RT_NS = 100, BROADCAST_SINGLE_COPY_MAX_BYTES = 1 << 20 };
/* A broadcast message of at least the copy probe's large size (256 KiB, one whole FIFO piece)
 * also goes single copy where the two-way verdict holds: its two copies then run one after
 * the other, as an exchange's do, not overlapped as the one-way verdict (the slower copy
 * alone) assumes. On the Intel VM (family 6 model 207; the probe read 256 KiB in 28 us
 * fresh and 14 sent again, copied it in and out in 14 + 14: two-way yes, one-way no), 2
 * ranks, in place, us per call, medians of 8 launches alternating with the build before
 * (ABBA): 256K 15.8 against 20.7 (6 of 8 pairs faster), 512K 33.1 against 37.1 (8 of 8),
 * 1M 106.5 against 108.5 (4 of 8), 2M (no change) 197 against 195; Open MPI's, in 6 rounds
 * interleaved with both just before, 14.3, 26.0 and 75.9. Below 256 KiB, with the same
 * rule from 64 KiB, one copy lost: 64K 4.95 against 4.1 (5 of 6 launches), 128K 9.4
 * against 8.3, so the fresh read's rule keeps those, unless the probe read its message sent
 * again 30% faster than the slower copy (WEFT__SINGLE_COPY_AGAIN_ONE_WAY), which that VM's
 * did not (14 us against 14-16). A stream of broadcasts runs at the read's pace on one copy
 * and at the slower copy's on two, and one copy also hands its message over with a round
 * trip more, so it needs a clear lead. On the Intel VM of 2026-12-03 (family 6 model 167:
 * read sent again 8.0-9.6 us, copies 11-12 in and 13.1-14.2 out, 0.59-0.70 of the slower)
 * one copy from 64 KiB ran, 2 ranks, in place, us per call, 5 rounds of perf/compare
 * alternating with the build before and Open MPI: 64K 2.93 against 3.57 (every round;
 * Open MPI 3.66), 128K 5.44 against 6.30 (Open MPI 6.53); 32K and 256K-1M unchanged. One
 * broadcast after a barrier, the receiver's time (medians of 4000, 2 launches): sent again
 * 64K 2.67-2.71 against 7.07-7.16, 128K 4.59-4.63 against 12.76; a buffer the root rewrote
 * before each call, 64K 6.51-6.53 against 6.57-6.62, 128K 11.94-12.07 against 11.66-11.73,
 * and the root waits for the read (64K 6.8 against 2.5). */
enum { BROADCAST_TWO_WAY_MIN_BYTES = 256 << 10 };
/* All of the above was measured on the Intel VM. On the AMD EPYC VM (Zen 5, two CCDs,
 * 440-850 ns round trips) process_vm_readv read a peer's freshly written buffer at 12-18
 * GB/s against memcpy's 33-49, and two copies won every row: 2 ranks all-gather 1.4-2.5x,
 * all-to-all 1.1-1.6x, broadcast 1.4-2.2x; 4 ranks on 2 cores all-gather 1.4-1.9x. No rule
 * on the round trip told the machines apart, so where the transport measured both paths
 * (copy_verdict, transports/shm/shm_copy_probe.h) the measurement replaces the rules'
 * guess of which path is faster, and the rules keep only their bounds (sizes, staging).
 * With more ranks than cores all-to-all(v) once kept the rules whatever the probe said (one
 * copy spares a receiver waiting for a descheduled sender: unbound, 4 ranks on 2 cores, 4M
 * 735-874 us one copy against 923-934 two). Since weftrun binds such ranks round-robin, two
 * copies won there too as the probe said (AMD VM, 4 ranks on 2 cores, out-of-place
 * all-to-all, us per call, medians of 5 launches interleaved with Open MPI's, one copy / two
 * copies / Open MPI: 512K 143 / 80 / 143, 2M 413 / 270 / 454, 4M 1033 / 709 / 855, 8M 2762 /
 * 1510 / 2373, 16M 5984 / 3603 / 5109; unbound, medians of 4: 4M 1117 / 778, 16M 5254 /
 * 3610), so the measurement decides there as well: the one between two CPUs, which serves
 * every connection of a rank, to ranks on its own CPU too (weft__shm_cpu_verdict says why).
 * Below 64 KiB the 256 KiB measurement misled: on the Zen 4 VM (one L3) it said two copies
 * in most launches, but in 2 of 8 a slow copy-in at the probe (8-24 us against 5) tipped one
 * direction to one copy (see weft__shm_pair_verdict), and those launches ran all-gather 16-64 KiB 2-3x
 * slower (16K 3.3-3.4 us against 1.1-1.9, 64K 7.7-8.2 against 3.7-6.7; 8 launches): a 16 KiB read
 * by process_vm_readv took 2.8-2.9 us where copying it in and out took 0.6-0.8 together.
 * So the transport measures a small message as well, and messages below 64 KiB follow that
 * measurement (WEFT__SINGLE_COPY_SMALL_*). */

/* An all-gather block of at least twice the size that goes past the cache
 * (weft__mem_nt_threshold, 16 MiB by default) goes on two copies whatever the probe said.
 * process_vm_readv's kernel copy writes through the cache, where the receiver copying out
 * of the FIFO writes a large block past it; and out of place, the step-0 send reads sendbuf
 * once for the FIFO and for the own block (weft__req.copy_to, algos/all_gather/ring.c),
 * where one copy reads it twice, for the own copy and for the peer's read. On the Intel VM
 * of 2026-12-03 (family 6 model 167), 2 ranks bound, us per call, 3 alternating launches,
 * one copy / two copies (nccl-tests sizes: the whole output, blocks of half of it): out of
 * place 8M 652-657 / 843-1147, 16M 1350-1488 / 1677-1705, 32M 3386-3663 / 3509-3551 (4 more
 * launches: 2965-3379 / 3394-4171), 40M 4388-5759 / 4243-4361, 48M 6054-7329 / 5319-5518,
 * 64M 8571-9412 / 7678-8259, 128M 19089-19554 / 16809-17569; in place 40M 2737-2947 /
 * 3092-3443, 48M 3636-4379 / 3805-4026, 56M 4730-5207 / 4689-4742, 64M 6618-7135 /
 * 5615-5669, 128M 14008-14371 / 12200-12662. The bound sits where both columns have
 * turned. All-to-all keeps one copy: its own block is other data, and two copies lost
 * there at every size of 16-256 MiB, in place and out (64M out of place 9850-10286 /
 * 10854-10898). */
/* The sends of a group that also receives (weft__req.p2p_exchange) follow all-to-all's
 * rules: both cores are busy, as in an exchange. On the Intel VM of 2026-12-03 (family 6
 * model 167), sendrecv_perf against the build before (two copies) and Open MPI's
 * MPI_Sendrecv, 2 ranks bound, out of place, us per call, medians of 3 rounds of
 * perf/compare: 8K 1.38 / 1.71 / 2.02, 16K 1.58 / 2.79 / 2.21, 64K 3.31 / 6.64 / 4.45, 128K
 * 5.92 / 18.2 / 7.00, 1M 52.1 / 141.5 / 56.4, 16M 1489 / 2655 / 1641, 64M 11367 / 12085 /
 * 10988. With 4 ranks on 2 cores one copy won from 32 KiB (128K 16.7 against 35.7, 2M 390
 * against 632, 32M 13074 against 14714, one launch each), so with more ranks than cores
 * such a message goes single copy from 64 KiB at any size: a rank receives just the one.
 * An out-of-place scatter's root (weft__req.busy_sender) copies its own block while the
 * peers read theirs, where as puts its core wrote half of each message after its copy: 2
 * ranks, us per call, this / puts / Open MPI: 2M 56.5 / 105.8 / 87.3, 16M 720 / 1029 / 1312,
 * 64M 4319 / 5081 / 8253, 256M 29027 / 34954 / 46535. With 4 ranks on 2 cores, where puts
 * are off and its messages went on two copies, reads won from 64 KiB messages (out of place,
 * us per call, 2 launches each, two copies / reads: 1M 59-66 / 25-31, 4M 331-355 / 176-195,
 * 16M 1275-1334 / 729-740, 256M 32206-32302 / 24389-25144; 256K 14.7-14.8 / 11.4-12.0). */
static int put_or_read_wanted(const weft__req *r, unsigned copy_verdict);

int weft__req_single_copy_wanted(const struct weft_comm *comm, const weft__req *r, unsigned peer_rt_ns,
                                 unsigned copy_verdict) {
  if (r->call == NULL || r->call->fp.coll == 0) return 0;
  if (r->busy_sender) return put_or_read_wanted(r, copy_verdict);
  weft__coll_t coll = (weft__coll_t)(r->call->fp.coll - 1);
  size_t esize = weft__dtype_size((weft_datatype_t)(r->call->fp.type & 15u));
  int measured = (copy_verdict & WEFT__SINGLE_COPY_MEASURED) != 0;
  if (coll == WEFT__COLL_BROADCAST) { /* the call's size: the chain's chunks of larger ones stay */
    int far = measured ? (copy_verdict & (WEFT__SINGLE_COPY_ONE_WAY | WEFT__SINGLE_COPY_AGAIN_ONE_WAY)) != 0 ||
                             ((copy_verdict & WEFT__SINGLE_COPY_TWO_WAY) && r->bytes >= BROADCAST_TWO_WAY_MIN_BYTES)
                       : peer_rt_ns >= BROADCAST_SINGLE_COPY_MIN_RT_NS;
    return !comm->oversubscribed && far && r->bytes >= SINGLE_COPY_SMALL_BYTES &&
           r->call->fp.count * esize <= BROADCAST_SINGLE_COPY_MAX_BYTES;
  }
  if (coll != WEFT__COLL_ALL_GATHER && coll != WEFT__COLL_ALL_TO_ALL && coll != WEFT__COLL_ALL_TO_ALLV &&
      !(coll == WEFT__COLL_SEND && r->p2p_exchange))
    return 0;
  if (coll == WEFT__COLL_ALL_GATHER && r->call->fp.count * esize / 2 >= weft__mem_nt_threshold()) return 0;
  if (r->bytes < SINGLE_COPY_SMALL_BYTES && (copy_verdict & WEFT__SINGLE_COPY_SMALL_MEASURED)) {
    if (!(copy_verdict & WEFT__SINGLE_COPY_SMALL_TWO_WAY)) return 0;
  } else if (measured && !(copy_verdict & WEFT__SINGLE_COPY_TWO_WAY)) {
    return 0;
  }
  if (r->bytes < SINGLE_COPY_SMALL_BYTES && (comm->oversubscribed || r->staged)) return 0;
  if (!comm->oversubscribed || coll == WEFT__COLL_SEND) return 1;
  /* What a rank receives: count elements from each rank (all-to-allv's counts are per pair,
   * its fingerprint's count 0: small, as MoE's are, or not, it goes single copy). */
  return r->call->fp.count * esize * (uint64_t)comm->nranks <= OVERSUBSCRIBED_SINGLE_COPY_MAX_BYTES;
}

/* Broadcast messages of calls from 64 KiB, and gather and scatter messages from 64 KiB, go
 * as puts where one copy beat copy-in plus copy-out. The root of a broadcast has nothing to
 * do but send, so its core writes half of each message while the receiver reads the other
 * half: each copies half the bytes, where one copy left the root idle and two copies have
 * both cores copy all of them. On the Intel
 * VM of 2026-12-03 (family 6 model 167; its probe: two-way yes, one-way no), 2 ranks bound,
 * in place, us per call, without / with puts (2 launches each, -n 10 from 64 KiB, -n 2000
 * below): 8K 0.54-0.83 / 1.51-2.46, 16K 0.93-1.26 / 1.60-2.04, 32K 1.86-2.08 / 1.82-1.93,
 * 64K 3.24-4.51 / 2.72-3.91, 128K 5.43-8.57 / 3.88-4.47, 256K 10.6-10.9 / 6.6-6.8 (one
 * copy before), 1M 53.6-63.8 / 22.5-26.8 (one copy), 4M 300-304 / 193-224 (two copies),
 * 16M 1186-1259 / 767-903, 64M 8866-8913 / 5585-6719, 256M 36233-37068 / 26257-26656;
 * out of place within the spread at every size (64M 13039-13722 / 12892-14024). Below
 * 64 KiB the hand-over's round trip outweighs the halved copy. With more ranks, each hop
 * of the chain or tree is such a pair (unmeasured here: 2 cores). Gather's senders and
 * scatter's receivers wait the same way, so their messages from 64 KiB go as puts too: 2
 * ranks, in place (nccl-tests sizes: the whole buffer, messages of half of it), us per
 * call, the build before / puts, 2 launches: gather 256K 6.4-6.5 / 4.5, 1M 26.6-27.0 /
 * 11.7, 4M 141-147 / 58-61, 16M 583-610 / 382-551, 64M 3017-3042 / 2281-2286, 256M
 * 13508-13971 / 12263-12786; scatter 1M 27.0-27.4 / 11.8, 4M 141-148 / 65-87, 64M
 * 3094-3337 / 2162-2439; out of place 4-16 MiB 1.15-1.3x faster, 64M at parity (5
 * launches, gather 6832-7508 / 6930-7940, scatter 6434-7548 / 6398-7720), 256M 1.03-1.08x.
 * With more ranks the gather root reads half of each message while all its senders write
 * theirs at once, and the scatter root writes half of each where it copied all of each
 * into the FIFOs. */
_Static_assert((int)WEFT__PUT_MIN_BYTES == (int)SINGLE_COPY_SMALL_BYTES,
               "puts start where single copy leaves its small class");

/* Where a put would be wanted with a core per rank, a busy sender's message
 * (weft__req.busy_sender) goes single copy as a plain read instead, with more ranks than
 * cores too. */
static int put_or_read_wanted(const weft__req *r, unsigned copy_verdict) {
  const unsigned one_copy_faster = WEFT__SINGLE_COPY_MEASURED | WEFT__SINGLE_COPY_TWO_WAY;
  if (r->call == NULL || r->call->fp.coll == 0 || (copy_verdict & one_copy_faster) != one_copy_faster)
    return 0;
  weft__coll_t coll = (weft__coll_t)(r->call->fp.coll - 1);
  if (coll == WEFT__COLL_BROADCAST) /* the call's size: its chunks are the messages */
    return r->call->fp.count * weft__dtype_size((weft_datatype_t)(r->call->fp.type & 15u)) >= WEFT__PUT_MIN_BYTES;
  return (coll == WEFT__COLL_GATHER || coll == WEFT__COLL_SCATTER) && r->bytes >= WEFT__PUT_MIN_BYTES;
}

int weft__req_put_wanted(const struct weft_comm *comm, const weft__req *r, unsigned copy_verdict) {
  return !r->busy_sender && !comm->oversubscribed && put_or_read_wanted(r, copy_verdict);
}

/* A reducing receive on a transport that cannot reduce on arrival: the message lands in a
 * host bounce buffer, reduced into place when it is complete (stage_done). An allocation
 * failure leaves stage NULL with stage_dst set, reported by the next progress. */
static void stage_reduce(weft__req *r) {
  r->stage_dst = r->dst;
  r->stage_acc = r->acc;
  r->stage = malloc(r->bytes);
  r->dst = r->stage;
  r->acc = NULL;
}

static void stage_done(weft__req *r) {
  size_t esize = weft__dtype_size(r->dtype);
  weft__mem_reduce(r->mem, r->stage_dst, r->stage_acc, r->stage, r->bytes / esize, r->dtype, r->op);
  weft__mem_avg(r->mem, r->stage_dst, r->bytes / esize, r->dtype, r->avg_div);
  weft__mem_publish(r->mem, 0);
  free(r->stage);
  r->stage = NULL;
  r->dst = r->stage_dst;
  r->acc = r->stage_acc;
  r->stage_dst = NULL;
}

void weft__req_post_slow(weft__conn *conn, weft__req *r) {
  if (r->kind == WEFT__REQ_SEND && !(r->mem->flags & WEFT__MEM_SYNC)) weft__mem_wait(r->mem);
  if (r->acc != NULL && r->bytes > 0 && !(conn->caps & WEFT__TRANSPORT_CAP_RECV_REDUCE)) stage_reduce(r);
  weft__req_enqueue(conn, r);
  if (conn->tr->post != NULL) conn->tr->post(conn, r);
}

/* The copy flags of r's bytes: past the cache when r->nt is set or the message is large. */
static unsigned copy_flags(const weft__req *r) { return weft__mem_nt_flag(r->bytes, r->nt); }

void weft__req_land(weft__req *r, size_t at, const void *data, size_t nbytes) {
  if (nbytes == 0) return; /* an empty message may have a NULL dst: no pointer arithmetic on it */
  char *dst = (char *)r->dst + at;
  if (r->acc == NULL) {
    unsigned flags = copy_flags(r);
    weft__mem_copy(r->mem, dst, data, nbytes, flags);
    weft__mem_publish(r->mem, flags);
    return;
  }
  size_t count = nbytes / weft__dtype_size(r->dtype);
  weft__mem_reduce(r->mem, dst, (const char *)r->acc + at, data, count, r->dtype, r->op);
  weft__mem_avg(r->mem, dst, count, r->dtype, r->avg_div);
  weft__mem_publish(r->mem, 0);
}

/* A receive feeding its fwd send (weft__req.fwd, NCCL's recvReduceSend / recvCopySend):
 * the piece at r->done goes into the send's next transport slot as it lands, instead of
 * waiting for the whole message and the send's own copy after it. Two ways (3
 * interleaved rounds, AMD EPYC VM):
 *   as a rule: landed in dst as usual, then copied from there into the slot (in cache).
 *     Reducing into the slot and copying it back into dst instead ran 1.1-2x slower (2
 *     ranks bound, all-reduce 1-64 MiB in place, 1-4 MiB out of place), and so did it
 *     into the scratch steps' slots of 4 ranks on 2 cores (1.1-1.4x, 16 MiB out of
 *     place): a reduction that stores to FIFO lines the peer last read runs slower than
 *     one into lines it has just loaded.
 *   fwd_skip_dst (dst a scratch only the send reads, and the send copies to copy_to):
 *     reduced (or copied) straight into the slot, then into copy_to from there, or in one
 *     pass with non-temporal stores to both where the transport and copy_to both bypass
 *     the cache (the space's reduce_fanout); the scratch is skipped, one pass less.
 *     Landing in the scratch and copying on from it ran 1.2x slower (2 ranks, out of
 *     place 16-64 MiB).
 * Returns 0, having written nothing, when the send is not exactly at r's bytes (an earlier
 * piece landed in dst), the send before it (after) has not completed, anything is still
 * queued on its connection, or the transport has no slot now: the piece then lands in
 * dst and the send carries it from there once posted, so no wait ever depends on the next
 * rank. A receive that divides (avg_div, WEFT_AVG) divides each piece where it was
 * reduced, dst or the slot, before it goes on; through the space's fan-out only when
 * avg_div is 2, the fan-out's own divisor (its number of inputs). */
static int forward_landed(struct weft_comm *comm, weft__req *r, const void *data, size_t nbytes) {
  weft__req *s = r->fwd;
  weft__conn *c = s->conn;
  if (nbytes == 0 || s->done != r->done || (s->after != NULL && !s->after->complete) || c->send_head != NULL ||
      r->stage_dst != NULL || !(c->caps & WEFT__TRANSPORT_CAP_SEND_SLOT))
    return 0;
  unsigned flags = 0;
  char *slot = c->tr->send_slot(comm, c, s, nbytes, &flags);
  if (slot == NULL) return 0;
  char *keep = s->copy_to != NULL ? (char *)s->copy_to + r->done : NULL;
  unsigned keep_flags = keep != NULL ? copy_flags(s) : 0;
  const char *from = slot; /* where keep is copied from: the piece in cache */
  if (!r->fwd_skip_dst) {
    weft__req_land(r, r->done, data, nbytes);
    from = (const char *)r->dst + r->done;
    weft__mem_copy(r->mem, slot, from, nbytes, flags);
  } else if (r->acc == NULL) {
    weft__mem_copy(r->mem, slot, data, nbytes, flags);
  } else {
    size_t count = nbytes / weft__dtype_size(r->dtype);
    char *acc = (char *)r->acc + r->done;
    char *out[2] = {slot, keep}, *in[2] = {acc, (char *)data};
    /* The fan-out divides WEFT_AVG by its two inputs: right when avg_div is 2 (2 ranks). */
    int fanout_divides_right = r->avg_div == 0 || r->avg_div == 2;
    if ((flags & WEFT__MEM_NT) && (keep == NULL || (keep_flags & WEFT__MEM_NT)) && fanout_divides_right &&
        r->mem->reduce_fanout(r->mem, out, keep != NULL ? 2 : 1, in, 2, count, r->dtype, r->op))
      keep = NULL; /* written with the slot */
    else {
      weft__mem_reduce(r->mem, slot, acc, data, count, r->dtype, r->op);
      weft__mem_avg(r->mem, slot, count, r->dtype, r->avg_div);
    }
  }
  if (keep != NULL) weft__mem_copy(r->mem, keep, from, nbytes, keep_flags);
  weft__mem_publish(r->mem, flags | keep_flags);
  c->tr->send_commit(comm, c, s, nbytes);
  r->conn->fwd_bytes += nbytes;
  return 1;
}

void weft__req_deliver(struct weft_comm *comm, weft__req *r, const void *data, size_t nbytes) {
  if (r->fwd == NULL || !forward_landed(comm, r, data, nbytes)) weft__req_land(r, r->done, data, nbytes);
  r->done += nbytes;
}

/* A send's copy_to gets the bytes [from, r->done) the transport has just read from r->src. */
static void copy_sent(weft__req *r, size_t from) {
  unsigned flags = copy_flags(r);
  weft__mem_copy(r->mem, (char *)r->copy_to + from, (const char *)r->src + from, r->done - from, flags);
  weft__mem_publish(r->mem, flags);
}

void weft__req_retire(struct weft_comm *comm, weft__conn *c, const weft__req *r) {
  if (c->op_mark != comm->last_seq) {
    c->op_mark = comm->last_seq;
    c->op_bytes[0] = c->op_bytes[1] = 0;
  }
  c->op_bytes[r->kind] += r->bytes;
}

/* Moves the head requests of one queue while they complete. */
static weft_status_t progress_queue(struct weft_comm *comm, weft__conn *c, int kind, int *progressed) {
  weft__req **head = kind == WEFT__REQ_SEND ? &c->send_head : &c->recv_head;
  while (*head != NULL) {
    weft__req *r = *head;
    size_t before = r->done;
    if (r->stage_dst != NULL && r->stage == NULL)
      return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: recv from peer %d: no memory to stage a "
                         "%zu-byte message", comm->rank, c->peer, r->bytes);
    weft_status_t st = kind == WEFT__REQ_SEND ? c->tr->send_test(comm, c, r, progressed)
                                              : c->tr->recv_test(comm, c, r, progressed);
    if (r->copy_to != NULL && r->done > before) copy_sent(r, before);
    if (st != WEFT_SUCCESS) return st;
    if (!r->complete) return WEFT_SUCCESS;
    if (r->stage != NULL) stage_done(r);
    weft__req_retire(comm, c, r);
    *head = r->next;
    *progressed = 1;
  }
  return WEFT_SUCCESS;
}

/* Every send queue first, then every receive queue: a receive that passes its pieces on
 * as they land (weft__req.fwd) can do so only once the sends queued before that send have
 * gone, and with the connections in rank order a rank's previous peer on a ring usually
 * comes first (with 3 ranks on 2 cores, the middle rank forwarded nothing in place). */
weft_status_t weft__comm_progress(struct weft_comm *comm, int *progressed) {
  for (int p = 0; p < comm->nranks; p++) {
    weft__conn *c = &comm->conns[p];
    if (c->send_head != NULL) WEFT_TRY(progress_queue(comm, c, WEFT__REQ_SEND, progressed));
  }
  for (int p = 0; p < comm->nranks; p++) {
    weft__conn *c = &comm->conns[p];
    if (c->recv_head != NULL) WEFT_TRY(progress_queue(comm, c, WEFT__REQ_RECV, progressed));
  }
  return WEFT_SUCCESS;
}

void weft__comm_drop_requests(struct weft_comm *comm) {
  for (int p = 0; p < comm->nranks; p++) {
    weft__conn *c = &comm->conns[p];
    for (weft__req *r = c->recv_head; r != NULL; r = r->next) {
      free(r->stage);
      r->stage = NULL;
    }
    c->send_head = c->send_tail = c->recv_head = c->recv_tail = NULL;
  }
}

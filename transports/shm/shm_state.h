/* shm_state.h: the shm transport's state per communicator, shared by its setup
 * (shm_setup.c), its data path (shm.c) and its placement probe (shm_placement.c). */
#ifndef WEFT_SHM_STATE_H
#define WEFT_SHM_STATE_H
#include <stddef.h>
#include <stdint.h>
#include "lib/comm.h"
#include "transports/shm/shm_conn.h"
#include "transports/shm/shm_segment.h"
#include "transports/transport.h"

typedef struct {
  int npeers;
  int *peers;                 /* [npeers] ranks; index i owns FIFO i of our segment */
  size_t nslots, slot_bytes, fifo_bytes;
  weft__shm_segment own;
  weft__shm_segment *remote;  /* [npeers], the peer's segment we write into */
  weft__shm_conn *conns;      /* [npeers] */
  /* Setup (shm_setup.c), all closed once connected */
  int listen_fd;
  int *out_fds, *in_fds;      /* [npeers] setup sockets: we connected / we accepted */
  int *accepted;              /* [npeers + WEFT__SHM_STRAYS] accepted sockets whose hello has
                                 not come yet, oldest first */
  int naccepted, checked, nmapped, nanswered;
  uint8_t nonce[16];          /* random, in our card: hellos to us must MAC it (lib/siphash.h) */
  uint8_t (*nonces)[16];      /* [npeers] the peers' nonces, from their cards */
  size_t cma_bytes;           /* WEFT_SHM_CMA_BYTES: single copy from this size; 0: off */
  int cma_all;                /* WEFT_SHM_CMA_CALLS=all (1) or put (2): every call's messages,
                                 not only the ones the core wants on one copy
                                 (weft__req_single_copy_wanted); put: each one that splits as a
                                 put, not only those weft__req_put_wanted wants */
  uint64_t probe;             /* a random word peers read to test CMA on us */
  char *scratch;              /* SHM_CMA_REDUCE_PIECE bytes, allocated on first use */
  char *copy_probe_buf;       /* WEFT__SHM_COPY_PROBE_BYTES, allocated on first use */
  int copy_probe_on;          /* WEFT_SHM_COPY_PROBE (default 1; 0: the rules of lib/req.c alone) */
  int ll_on;                  /* WEFT_PROTO allows LL: messages of <= ll_max bytes to us use it */
  uint64_t ll_max;
  int nt_mode;                /* WEFT_SHM_NT_COPY (shm_placement.h) */
  int prefetch_lines;         /* WEFT_SHM_PREFETCH (default 32); 0 when set so or the CPU
                                 cannot (weft__shm_prefetch_write) */
  uint64_t sleep_max_ns;      /* one doorbell sleep at most (WEFT_SHM_SLEEP_MAX_US) */
  int membarrier;             /* registered for membarrier(2), and WEFT_SHM_MEMBARRIER allows it:
                                 we sleep after it and ring such peers without a fence */
  /* Large uniform collectives so far, those and their bytes since the last probe among
   * them, the smaller ones since the last probe, and the placement probes run
   * (weft__shm_probe_due): the same on every rank. */
  uint64_t placement_calls, placement_since_calls, placement_since_bytes, placement_since_small;
  uint64_t placement_probes;
  unsigned cpu_verdict;        /* with more ranks than cores, the copy verdict measured between two
                                 CPUs that serves every connection (0: none yet; shm_placement.c) */
} weft__shm_state;

/* The card: what every rank learns of every other at listen. */
typedef struct {
  int32_t ok;           /* 0: this rank could not prepare its shared memory */
  int32_t pad;
  uint64_t nslots, slot_bytes;
  uint8_t nonce[16];    /* what a setup message to this rank must MAC with the secret */
} weft__shm_card;

/* Room for connections that are not our peers' (another process found the socket's name
 * in /proc/net/unix) beside the peers' own: the oldest is closed when more come. */
enum { WEFT__SHM_STRAYS = 16 };

extern const weft__transport weft__transport_shm;

/* comm's shm state (NULL before listen and after close). */
static inline weft__shm_state *weft__shm_state_of(struct weft_comm *comm) {
  static int slot = -1; /* the registry is constant: look it up once */
  if (slot < 0) slot = weft__transport_index(&weft__transport_shm);
  return comm->transport_state[slot];
}

/* The FIFO geometry per direction of each pair when WEFT_SHM_NSLOTS / WEFT_SHM_SLOT_BYTES
 * leave it unset: 64 slots of 32 KiB, moved in pieces of up to 8 slots (256 KiB,
 * shm_fifo.h); with more ranks on the host than cores (comm->oversubscribed, the same on
 * every rank of a host, as the geometry must be), 8 slots of 128 KiB, a piece a slot. Why
 * 64 slots: how many messages a sender may run ahead of its receiver is the number of
 * slots, and small messages ran faster with more (a message takes a whole slot, so 8 slots
 * of 256 KiB let a root run 8 broadcasts ahead whatever their size); 256 KiB pieces keep
 * large messages as they were (32 KiB pieces, without spanning, ran all-reduce 512 KiB-16
 * MiB 3-7% slower). Intel VM (family 6 model 167, 2 vCPUs), 2 ranks bound, 3 rounds
 * alternating with 8 x 256K in one run, us per call out of place / in place, medians:
 * broadcast 4K 0.74/0.60 -> 0.60/0.42, 8K 0.99/0.93 -> 0.67/0.61, 16K 1.79/1.61 ->
 * 1.07/1.05, 64-128K 1.13-1.15x faster out of place; all-gather and all-to-all 4-8K
 * 1.05-1.31x, all-reduce 4-8K 1.05-1.14x, 32-256K 1.05-1.08x, reduce-scatter 4K 1.14x,
 * 128-256K 1.05-1.10x; 512 KiB-64 MiB 0.90-1.15x, and in 4 more such rounds at 8-64 MiB,
 * with single copy's descriptors capped at 8 in flight (shm.c's cma_send_progress),
 * all-gather 1.11-1.16x out of place and 1.19-1.26x in place at 8-32 MiB, all-to-all
 * 1.11-1.22x out of place, all-reduce and broadcast 0.94-1.03x (broadcast 64 MiB in place
 * 1.18x). Broadcast 32K in place read 1.84 -> 2.17 there (out of place 2.63 -> 2.31),
 * 1.88-2.07 against 1.99-2.06 in 3 launches later. With more ranks than cores more slots
 * lost (4 ranks on 2 cores, 3 rounds, against 8 x 128K: 32 x 32K in pieces of 4 ran
 * broadcast 4-16K 1.24-1.47x faster but all-reduce 8-64K 0.83-0.93x, reduce-scatter 8-32K
 * 0.88-0.96x and all-gather 64K 0.86-0.89x; 16 x 64K all-reduce 32-64K 0.93-0.96x), so the
 * oversubscribed geometry stays. Why its smaller slots: ranks that share a core take turns
 * on it, so a sender runs ahead by up to the whole FIFO before its receiver runs, and every
 * byte of the lead is read back after the other ranks' calls went through the caches (an
 * all-to-all of 4 ranks touches 12 FIFOs: 24 MiB at 2 MiB each, most of the VM's 32 MiB L3
 * before the buffers); halving the lead halves that. Measured on the Zen 3 VM (2 cores, one
 * L3), 4 ranks, 12 launches per geometry rotated in one run, medians of per-launch ratios
 * (64 KiB-64 MiB), 8 x 128K against 8 x 256K: all-reduce 1.11-1.38x faster (9-11 of 12),
 * all-to-all 1.02-1.32x (1.21-1.32x at 1-8 MiB), reduce-scatter 1.06-1.21x, broadcast
 * 1.01-1.23x, all-gather 1.07-1.50x from 1 MiB and 0.85-1.03x below (16-256 KiB again, 12
 * launches: 0.97-1.03x); 3 ranks all-reduce 0.98-1.14x, all-to-all 1.02-1.53x; 8 ranks
 * all-reduce 0.95-1.08x to 1 MiB, 1.07-1.48x from 2 MiB. 4 x 128K ran all-to-all faster
 * still (1.10-1.80x) but lost all-reduce to 1 MiB (0.86-0.97x) and all-gather at 64-128 KiB
 * (0.81-0.84x); 8 x 64K and 2 x 256K lost all-reduce or all-gather to it.
 * Thread safety: pure. */
void weft__shm_default_geometry(int oversubscribed, size_t *nslots, size_t *slot_bytes);

/* Setup (shm_setup.c): the transport's listen, connect, close and can_connect. */
int weft__shm_can_connect(const struct weft__topo_system *topo, int a, int b);
weft_status_t weft__shm_listen(struct weft_comm *comm, const int *peers, int npeers, void *card);
weft_status_t weft__shm_connect(struct weft_comm *comm, const void *const *cards, char *waiting, size_t len);
void weft__shm_close(struct weft_comm *comm);
#endif

/*
 * weft.h: the one public header of weft, a collective communication library.
 *
 * The model is NCCL's: a group of processes ("ranks") builds a communicator from a
 * unique id that one of them created and shared; collectives are called by every
 * rank of the communicator in the same order, with the same count, datatype, op and
 * root. Each call is enqueued on an ordered stream and returns; a NULL stream means
 * the call completes before it returns.
 *
 * Units used throughout: counts are in elements of the given datatype, sizes in bytes,
 * times in milliseconds unless a name says otherwise.
 *
 * Thread safety, in general: functions that take no communicator are thread-safe.
 * A communicator may be used from several threads, but its calls then execute in
 * the order they take its internal lock; every rank must see the same order, so
 * callers that use one communicator from several threads must order those calls
 * themselves (as with NCCL).
 */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 2
#define WEFT_VERSION_PATCH 0
/* WEFT_VERSION_CODE = major * 10000 + minor * 100 + patch, as NCCL_VERSION_CODE. */
#define WEFT_VERSION_CODE (WEFT_VERSION_MAJOR * 10000 + WEFT_VERSION_MINOR * 100 + WEFT_VERSION_PATCH)

/*
 * Status codes. One list generates the enum, weft_get_error_string() and the
 * internal name table, so they can never disagree.
 *   X(name, value, description)
 */
#define WEFT_STATUS_LIST(X)                                                              \
  X(WEFT_SUCCESS, 0, "success")                                                          \
  X(WEFT_IN_PROGRESS, 1, "operation still in progress")                                 \
  X(WEFT_ERR_INVALID_ARGUMENT, 2, "invalid argument")                                    \
  X(WEFT_ERR_INVALID_USAGE, 3, "invalid usage")                                          \
  X(WEFT_ERR_SYSTEM, 4, "system call failed")                                            \
  X(WEFT_ERR_INTERNAL, 5, "internal error")                                              \
  X(WEFT_ERR_REMOTE, 6, "a remote rank failed, exited or disconnected")                  \
  X(WEFT_ERR_TIMEOUT, 7, "timed out waiting for a remote rank")                          \
  X(WEFT_ERR_AUTH, 8, "unique id rejected: wrong secret or mismatched job")              \
  X(WEFT_ERR_NO_MEMORY, 9, "out of memory")                                              \
  X(WEFT_ERR_ABORTED, 10, "communicator was aborted")                                    \
  X(WEFT_ERR_UNSUPPORTED, 11, "not supported on this system or build")                 \
  X(WEFT_ERR_REVOKED, 12, "communicator was revoked (weft_comm_revoke) by this or another rank")

typedef enum {
#define WEFT_STATUS_ENUM_(name, value, text) name = value,
  WEFT_STATUS_LIST(WEFT_STATUS_ENUM_)
#undef WEFT_STATUS_ENUM_
  WEFT_NUM_STATUS
} weft_status_t;

/* Element types; the values match NCCL's ncclDataType_t. */
typedef enum {
  WEFT_INT8 = 0,
  WEFT_UINT8 = 1,
  WEFT_INT32 = 2,
  WEFT_UINT32 = 3,
  WEFT_INT64 = 4,
  WEFT_UINT64 = 5,
  WEFT_FLOAT16 = 6, /* IEEE 754 binary16 */
  WEFT_FLOAT32 = 7,
  WEFT_FLOAT64 = 8,
  WEFT_BFLOAT16 = 9, /* bfloat16: the top 16 bits of a binary32 */
  WEFT_NUM_DATATYPES
} weft_datatype_t;

/*
 * Reduction operations; the values match NCCL's ncclRedOp_t.
 * Integer sum and prod wrap modulo 2^bits (computed in unsigned arithmetic).
 * fp16 and bf16 are converted to fp32 for every operation and rounded back to
 * nearest-even. WEFT_AVG is the sum divided by the number of ranks once, at the end
 * (integer division, truncating toward zero, for integer types), as NCCL defines it.
 */
typedef enum {
  WEFT_SUM = 0,
  WEFT_PROD = 1,
  WEFT_MAX = 2,
  WEFT_MIN = 3,
  WEFT_AVG = 4,
  WEFT_NUM_OPS
} weft_redop_t;

#define WEFT_UNIQUE_ID_BYTES 128
/*
 * Everything a rank needs to join a communicator: the bootstrap root's address and
 * port (IPv4 or IPv6) and a 128-bit random secret. Opaque; copy it by value to every
 * rank (MPI_Bcast, a file, the environment via weft_unique_id_to_string).
 */
typedef struct {
  char internal[WEFT_UNIQUE_ID_BYTES];
} weft_unique_id_t;

typedef struct weft_comm *weft_comm_t;
typedef struct weft_stream *weft_stream_t;

#define WEFT_CONFIG_UNDEF_INT (-2147483647 - 1)
#define WEFT_CONFIG_MAGIC 0x77656674u /* "weft" */
/*
 * Communicator options. Always start from WEFT_CONFIG_INITIALIZER so that fields added
 * later keep their defaults; a field left at WEFT_CONFIG_UNDEF_INT takes the value of
 * its environment variable, else the default.
 */
typedef struct {
  size_t size;      /* sizeof(weft_config_t), set by the initializer */
  unsigned magic;   /* WEFT_CONFIG_MAGIC, set by the initializer */
  int timeout_ms;   /* deadline of every wait, in ms; env WEFT_TIMEOUT_MS; default 120000 */
  int blocking;     /* 1: init returns when the communicator is ready (default);
                       0: init returns WEFT_IN_PROGRESS at once and finishes in the
                       background; poll weft_comm_get_async_error(). env WEFT_COMM_BLOCKING */
} weft_config_t;

#define WEFT_CONFIG_INITIALIZER \
  { sizeof(weft_config_t), WEFT_CONFIG_MAGIC, WEFT_CONFIG_UNDEF_INT, WEFT_CONFIG_UNDEF_INT }

/* ------------------------------------------------------------------------------------
 * Errors and version
 * ------------------------------------------------------------------------------------ */

/*
 * weft_get_error_string: a static, human-readable description of a status code.
 * Never NULL; an unknown code gives "unknown status". Thread-safe.
 */
WEFT_API const char *weft_get_error_string(weft_status_t status);

/*
 * weft_get_last_error: the message of the last error weft raised, naming the rank,
 * the peer when one is involved, the operation and its sequence number on the
 * communicator, e.g. "rank 1: all_reduce #42 (count 1024 float32 sum): recv from peer 0:
 * peer exited". With comm != NULL: that communicator's last error; with NULL: the last
 * error raised by any call made from this thread. "" when there is none.
 * The string stays valid until the next weft call on that communicator or thread.
 * Thread-safe.
 */
WEFT_API const char *weft_get_last_error(weft_comm_t comm);

/*
 * weft_get_version: *version = WEFT_VERSION_CODE of the library actually linked.
 * Errors: WEFT_ERR_INVALID_ARGUMENT if version is NULL. Thread-safe.
 */
WEFT_API weft_status_t weft_get_version(int *version);

/*
 * weft_datatype_size: bytes of one element of datatype (1, 2, 4 or 8); 0 for a value
 * outside weft_datatype_t. Thread-safe.
 */
WEFT_API size_t weft_datatype_size(weft_datatype_t datatype);

/* ------------------------------------------------------------------------------------
 * Communicators
 * ------------------------------------------------------------------------------------ */

/*
 * weft_get_unique_id: creates a new unique id and starts its bootstrap root, a
 * thread of the calling process that listens on the chosen interface
 * (WEFT_SOCKET_IFNAME, else the first non-loopback interface that is up, else
 * loopback; WEFT_SOCKET_FAMILY=AF_INET or AF_INET6 restricts the family) until every
 * rank that joins with the id has destroyed its communicator, or a joining rank's
 * deadline has passed. Call it on one rank and give the id to all ranks.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (id NULL), WEFT_ERR_SYSTEM (no usable interface,
 * socket, bind, listen or thread creation failed; the message says which).
 * Thread-safe.
 */
WEFT_API weft_status_t weft_get_unique_id(weft_unique_id_t *id);

/*
 * weft_unique_id_to_string / weft_unique_id_from_string: the id as 256 lowercase hex
 * digits plus a NUL (buffer of at least WEFT_UNIQUE_ID_STRING_BYTES), for passing it
 * through the environment (weftrun sets WEFT_UNIQUE_ID).
 * Errors: WEFT_ERR_INVALID_ARGUMENT (NULL pointer, wrong length or a non-hex digit).
 * Thread-safe.
 */
#define WEFT_UNIQUE_ID_STRING_BYTES (2 * WEFT_UNIQUE_ID_BYTES + 1)
WEFT_API weft_status_t weft_unique_id_to_string(const weft_unique_id_t *id, char *str);
WEFT_API weft_status_t weft_unique_id_from_string(const char *str, weft_unique_id_t *id);

/*
 * weft_comm_init_rank: creates this rank's communicator of nranks ranks. Collective:
 * every rank 0..nranks-1 must call it with the same id. Ranks prove the id's secret to
 * the root, exchange addresses, and connect to their peers: shared memory to ranks on
 * the same host, TCP to the others (WEFT_TRANSPORT=shm|socket forces one).
 * Returns when all ranks are connected, or at the deadline (config timeout).
 * Errors: WEFT_ERR_INVALID_ARGUMENT (comm NULL, nranks < 1, rank outside
 * [0, nranks), a malformed id), WEFT_ERR_AUTH (the root rejected the secret, or
 * other ranks joined with another nranks, or this rank number was already taken),
 * WEFT_ERR_INVALID_USAGE (the id's communicator is already complete: an id serves one),
 * WEFT_ERR_TIMEOUT (not every rank joined or connected in time; the message lists
 * the missing ranks), WEFT_ERR_REMOTE (a rank failed during init),
 * WEFT_ERR_SYSTEM, WEFT_ERR_NO_MEMORY. On error *comm is NULL.
 * Thread-safe (each call builds its own communicator).
 */
WEFT_API weft_status_t weft_comm_init_rank(weft_comm_t *comm, int nranks, weft_unique_id_t id,
                                           int rank);

/*
 * weft_comm_init_rank_config: as weft_comm_init_rank, with options (NULL = defaults).
 * With config->blocking == 0 it returns WEFT_IN_PROGRESS and *comm at once; the
 * communicator becomes usable when weft_comm_get_async_error() reports
 * WEFT_SUCCESS (calls made earlier wait for it). Further errors:
 * WEFT_ERR_INVALID_ARGUMENT (config not from WEFT_CONFIG_INITIALIZER, a negative
 * timeout, blocking not 0 or 1).
 */
WEFT_API weft_status_t weft_comm_init_rank_config(weft_comm_t *comm, int nranks,
                                                  weft_unique_id_t id, int rank,
                                                  const weft_config_t *config);

/*
 * weft_comm_init_from_env: weft_comm_init_rank_config with rank, size and rendezvous
 * taken from the launcher's environment. When launchers nest, the most specific wins:
 *   weftrun:             WEFT_UNIQUE_ID, WEFT_RANK, WEFT_NRANKS
 *   torchrun:            RANK, WORLD_SIZE (torchrun inside an srun step)
 *   Open MPI's mpirun:   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (inside an allocation)
 *   MPICH's hydra (PMI): PMI_RANK, PMI_SIZE
 *   Slurm's srun:        SLURM_PROCID, SLURM_STEP_NUM_TASKS
 * The bootstrap root (unless weftrun gave the id): at WEFT_ROOT_ADDR ("host:port",
 * "[v6]:port"), else MASTER_ADDR and MASTER_PORT, where rank 0 opens it; else, under mpirun
 * or srun --mpi=pmix with weft built with PMIx, rank 0's unique id is shared through the
 * launcher's PMIx server; else, under srun, at the step's first node on a port derived
 * from SLURM_JOB_ID and SLURM_STEP_ID. The secret of an agreed address is WEFT_SECRET
 * (32 hex digits) when set, else derived from the launcher's job id and the port: enough
 * to keep two jobs apart, not a defence against a hostile host (PMIx's is random).
 * With no launcher environment at all it makes a communicator of one rank (as MPI does
 * for a singleton) and logs a warning saying so.
 * Errors: those of weft_comm_init_rank_config, WEFT_ERR_INVALID_USAGE when a variable is
 * malformed or no root can be found (the message names what to set), WEFT_ERR_SYSTEM when
 * a PMIx call fails.
 */
WEFT_API weft_status_t weft_comm_init_from_env(weft_comm_t *comm, const weft_config_t *config);

/* The color of a rank that takes part in no child of weft_comm_split (NCCL_SPLIT_NOCOLOR). */
#define WEFT_SPLIT_NOCOLOR (-1)

/*
 * weft_comm_split: splits comm into disjoint child communicators, as NCCL's ncclCommSplit.
 * Collective over comm: every rank of comm calls it, in the same order relative to comm's
 * other calls. The ranks that pass the same color (>= 0) form one child; in it they are
 * ordered by key, ties broken by their rank in comm. A rank passing WEFT_SPLIT_NOCOLOR
 * joins no child and gets *newcomm = NULL. No unique id is needed: each color's lowest
 * rank of comm creates one (its process then hosts the child's bootstrap root) and it
 * travels over comm (two all-gathers of 12 and 132 bytes per rank), then every child
 * initializes as weft_comm_init_rank_config does, transports chosen as there.
 * config: the child's options (WEFT_CONFIG_INITIALIZER; NULL or an undefined timeout takes
 * comm's timeout); with config->blocking == 0 it returns WEFT_IN_PROGRESS as
 * weft_comm_init_rank_config does. The child is independent of comm: destroy each alone.
 * Errors (the same on every rank when the arguments are bad): WEFT_ERR_INVALID_ARGUMENT
 * (comm NULL; on any rank: newcomm NULL, a color < 0 other than WEFT_SPLIT_NOCOLOR, or a
 * config not from WEFT_CONFIG_INITIALIZER: the message names that rank),
 * WEFT_ERR_INVALID_USAGE (called inside a group, comm aborted or in error), the errors of
 * a collective on comm, and those of weft_comm_init_rank_config for the child (including
 * a leader's failure to create the id, naming the leader). On error *newcomm is NULL.
 * Thread safety: as a collective on comm.
 */
WEFT_API weft_status_t weft_comm_split(weft_comm_t comm, int color, int key, weft_comm_t *newcomm,
                                       const weft_config_t *config);

/*
 * weft_comm_destroy: waits for the communicator's queued operations (up to the
 * timeout), leaves the bootstrap and frees everything: shared-memory segments,
 * sockets, threads. Not collective, but a rank that destroys its communicator while
 * peers still need it makes their calls fail with WEFT_ERR_REMOTE.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (comm NULL), WEFT_ERR_TIMEOUT (queued work did not
 * finish in time; the communicator is aborted and freed anyway).
 * Not thread-safe with other calls on the same communicator.
 */
WEFT_API weft_status_t weft_comm_destroy(weft_comm_t comm);

/*
 * weft_comm_abort: makes every pending and future wait on comm fail at once with
 * WEFT_ERR_ABORTED, then frees it as weft_comm_destroy does. Use it after an error.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (comm NULL).
 * May be called from any thread while another thread is blocked in a call on comm;
 * no call on comm may start after it.
 */
WEFT_API weft_status_t weft_comm_abort(weft_comm_t comm);

/* ------------------------------------------------------------------------------------
 * Surviving a lost rank: revoke and shrink (issue 22). The semantics are NCCL 2.27's
 * ncclCommRevoke / ncclCommShrink and MPI ULFM's MPI_Comm_revoke / MPI_Comm_shrink /
 * MPI_Comm_agree. A typical recovery: a call fails with WEFT_ERR_REMOTE (a peer died) or
 * WEFT_ERR_REVOKED; the rank calls weft_comm_shrink(comm, NULL, WEFT_SHRINK_FAILED, &next,
 * NULL), then weft_comm_abort(comm), and goes on with next.
 * Both travel over a side channel of their own (each rank listens on one TCP port of the
 * interface the bootstrap uses; every message proves the communicator's secret), not over
 * the data connections or the bootstrap root, so they work when rank 0, whose process may
 * host the root, is the one that died.
 * ------------------------------------------------------------------------------------ */

/*
 * weft_comm_revoke: marks comm unusable on every rank. Not collective: any one rank may call
 * it, at any time. Every call on comm, on any rank, that is blocked in a wait or starts later
 * returns WEFT_ERR_REVOKED, naming the rank that revoked it, within milliseconds of the
 * notice arriving (a waiting call looks at the flag at least every ~1 ms), not at the
 * deadline. The notice goes straight to every rank, and each rank relays the first notice it
 * gets, so a revoker that dies halfway still reaches everyone alive. Returns once the notices
 * are sent (at most ~1 s when a peer's host does not answer). Revoking twice is harmless.
 * The communicator stays allocated: shrink it, then abort or destroy it.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (comm NULL), the failure of a non-blocking init it waits
 * for. Thread-safe, also while other threads are blocked in calls on comm.
 */
WEFT_API weft_status_t weft_comm_revoke(weft_comm_t comm);

/* weft_comm_shrink's n for "exclude every rank that has failed" (agreed by the survivors). */
#define WEFT_SHRINK_FAILED (-1)

/*
 * weft_comm_shrink: a new communicator of comm's ranks less some, without a unique id from
 * the caller. New ranks are numbered in the order of their old ranks. The lowest remaining
 * rank creates the new unique id (its process hosts the new bootstrap root) and sends it to
 * the others over the revoke channel, authenticated with comm's secret; then every remaining
 * rank initializes as weft_comm_init_rank_config does.
 *   n >= 0: NCCL's ncclCommShrink: exclude_ranks[0..n) are left out; every other rank of comm
 *     must call it with the same list (an excluded rank must not call it). comm may be
 *     healthy; it stays usable (not revoked).
 *   n == WEFT_SHRINK_FAILED: MPI ULFM's MPI_Comm_shrink: leaves out whatever ranks have
 *     failed; exclude_ranks is ignored. It revokes comm first (so that ranks still blocked in
 *     a call on it come here too), then the survivors agree on the failed set: rounds in
 *     which each survivor sends its set to the others and learns of deaths (a refused
 *     connection to a rank's listener: its process is gone), until a round brings no change
 *     (flooding consensus; at most nranks + 1 rounds; lib/agree.c). So two survivors that
 *     saw different failures build the same communicator, or fail alike. A rank alive but
 *     silent for comm's timeout is counted as failed; a rank that learns the others left it
 *     out returns WEFT_ERR_REMOTE. When another rank dies while the new communicator is being
 *     built, the survivors drop it alike (below) and agree again (up to 4 times), so the
 *     result is a smaller communicator or an error, never a hang.
 * Both modes end in a commit: the members agree once more, over comm, on the failed ranks
 * and on whether every member's init succeeded (a member that dies midway can leave some
 * members initialized and others not). Every member keeps the new communicator, or every
 * member drops it: WEFT_ERR_REMOTE naming the lost rank (n >= 0), or agreeing again.
 * Collective over the remaining ranks (NCCL and ULFM alike). config: the new communicator's
 * options (NULL, or a timeout left undefined: comm's timeout); blocking is ignored: shrink
 * returns once the new communicator is ready, since it watches the members while it is
 * built (a member that dies before joining makes every member's init fail at once). The new
 * communicator is independent of comm: destroy or abort each alone, comm as soon as shrink
 * returns (each rank sends what it agreed to every survivor before it returns, so the slower
 * ones need nothing more from it).
 * Errors: WEFT_ERR_INVALID_ARGUMENT (comm or newcomm NULL; n < -1; exclude_ranks NULL with
 * n > 0; an excluded rank outside [0, nranks) or the caller itself; config not from
 * WEFT_CONFIG_INITIALIZER), WEFT_ERR_INVALID_USAGE (comm has no revoke channel),
 * WEFT_ERR_REMOTE (the leader died before sending the id, or, in WEFT_SHRINK_FAILED mode,
 * this rank was left out or ranks kept dying), WEFT_ERR_TIMEOUT (no id from the leader in
 * time), WEFT_ERR_NO_MEMORY, and those of weft_comm_init_rank_config. On error *newcomm is
 * NULL. Every wait is bounded by comm's timeout. Thread safety: do not call it concurrently
 * with another shrink of comm; other threads may be blocked in calls on comm.
 */
WEFT_API weft_status_t weft_comm_shrink(weft_comm_t comm, const int *exclude_ranks, int n,
                                        weft_comm_t *newcomm, const weft_config_t *config);

/*
 * weft_comm_flight_record: the communicator's flight recorder as JSON text: its last
 * operations (WEFT_FLIGHT_RECORDER_ENTRIES of them, default 256), oldest first, each with
 * its sequence number, collective, count (elements), datatype, op, root, peer, algorithm,
 * start and end time (CLOCK_MONOTONIC nanoseconds; from the invariant TSC where the CPU has
 * one, else at the kernel tick's resolution, a few ms) and state, and for the operation in
 * flight the bytes moved per peer and the peers it waits for. The format is described in the
 * README; weft-flight(1) reads it.
 * buf: where the text goes, len bytes (buf may be NULL when len is 0, to ask the size).
 * *needed (may be NULL): the bytes the whole text needs, its terminating NUL included;
 * about 300 per entry kept plus 100 per rank plus 1 KiB (80 KiB with the defaults for 8
 * ranks).
 * Returns WEFT_SUCCESS when the whole text fit (NUL-terminated). Errors:
 * WEFT_ERR_INVALID_ARGUMENT (comm NULL; buf NULL with len > 0; len < *needed: then buf
 * holds the truncated, NUL-terminated start of the text, and a retry with a buffer of
 * *needed bytes gets all of it, give or take the operations that ran meanwhile),
 * WEFT_ERR_UNSUPPORTED (the recorder is off: WEFT_FLIGHT_RECORDER_ENTRIES=0, or no memory
 * for it at init), WEFT_ERR_TIMEOUT (an operation runs on another thread and did not hand
 * over a snapshot within 2 s; it does so within milliseconds while it waits), and those of
 * a communicator whose non-blocking init failed.
 * Thread safety: callable from any thread, also while another thread is inside a call on
 * comm (then that thread takes the snapshot while it waits, or when the call ends); not
 * from a signal handler (send SIGUSR1 instead: with WEFT_FLIGHT_RECORDER_DIR set, every
 * communicator then writes its file).
 */
WEFT_API weft_status_t weft_comm_flight_record(weft_comm_t comm, char *buf, size_t len, size_t *needed);

/*
 * weft_comm_count / weft_comm_user_rank: the number of ranks and this rank's index.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (NULL pointer). Thread-safe.
 */
WEFT_API weft_status_t weft_comm_count(const weft_comm_t comm, int *count);
WEFT_API weft_status_t weft_comm_user_rank(const weft_comm_t comm, int *rank);

/*
 * weft_comm_get_async_error: *async_error = WEFT_IN_PROGRESS while a non-blocking init
 * runs, the first error an operation on a stream raised on this communicator, or
 * WEFT_SUCCESS. Errors: WEFT_ERR_INVALID_ARGUMENT (NULL pointer). Thread-safe.
 */
WEFT_API weft_status_t weft_comm_get_async_error(weft_comm_t comm, weft_status_t *async_error);

/*
 * weft_get_algorithm: the name of the algorithm a call would run on comm ("ring",
 * "recursive_doubling", "rabenseifner", "tree", "hierarchical", "bruck", "pairwise", "chain",
 * "binomial", "linear", "dissemination", "p2p"): the tuner's choice, or what WEFT_ALGO forces.
 * collective: "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
 * "all_to_all" (or nccl-tests' "alltoall"), "all_to_allv", "gather", "scatter", "barrier",
 * "send", "recv" (or "sendrecv"). count and datatype as the call would pass them (count in
 * elements: per rank for all_gather and reduce_scatter, per peer for all_to_all).
 * *name is a static string. Every rank gets the same answer for the same arguments.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (NULL pointer, unknown collective, invalid datatype),
 * or the failure of a non-blocking init it waits for. Thread-safe.
 */
WEFT_API weft_status_t weft_get_algorithm(weft_comm_t comm, const char *collective, size_t count,
                                          weft_datatype_t datatype, const char **name);

/* ------------------------------------------------------------------------------------
 * Memory peers can map, and windows: single-copy collectives over shared memory.
 * As NCCL's ncclMemAlloc + ncclCommWindowRegister: buffers from weft_mem_alloc that
 * every rank registers as a window let a collective read and write its peers' buffers
 * directly (one pass over memory, no copy through a FIFO) when all ranks share a host.
 * ------------------------------------------------------------------------------------ */

/*
 * weft_mem_alloc: *ptr = size bytes of zeroed, 64 KiB-aligned memory that other processes
 * of this host may map (an anonymous memfd, mapped shared; it never appears in /dev/shm).
 * Use it for buffers that will be registered with weft_comm_window_register. Successive
 * blocks start at different offsets modulo 16 MiB, never an exact multiple of 256 MiB
 * apart: on AMD Zen such buffers evict each other from L1 and a direct all-reduce over
 * them ran at half speed (mem/map_colour.h). Takes 16 MiB of address space (not memory)
 * beyond size for the duration of the call.
 * size: bytes, > 0 (rounded up to whole pages internally).
 * Errors: WEFT_ERR_INVALID_ARGUMENT (ptr NULL, size 0), WEFT_ERR_SYSTEM (memfd_create,
 * ftruncate or mmap failed; the message says which), WEFT_ERR_NO_MEMORY. Thread-safe.
 */
WEFT_API weft_status_t weft_mem_alloc(void **ptr, size_t size);

/*
 * weft_mem_free: releases memory from weft_mem_alloc (ptr: the pointer it returned; NULL
 * is a no-op). Deregister every window in it first; a peer that mapped it keeps its
 * mapping (and the memory) until the window is deregistered or the communicator destroyed.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (ptr not from weft_mem_alloc). Thread-safe.
 */
WEFT_API weft_status_t weft_mem_free(void *ptr);

typedef struct weft_window *weft_window_t;

/*
 * weft_comm_window_register: registers buff (size bytes) as a window of comm. Collective:
 * every rank calls it, in the same order relative to comm's other collectives, each with
 * its own buffer (sizes may differ). Every rank maps every peer's buffer; a collective
 * whose send and receive buffers lie in windows on every rank, with at least
 * WEFT_DIRECT_MIN_BYTES bytes, then runs the "direct" algorithm (algos/direct.c): each
 * rank reduces or copies its share straight between the mapped buffers. Each rank's
 * buffers are checked at each call, so a call with any buffer outside a window runs the
 * tuner's usual algorithm (on every rank alike). Windows are usable for direct
 * collectives only when all ranks share one host and may open each other's memfds
 * (/proc/PID/fd: same user, ptrace read access); otherwise registration still succeeds
 * and one info line says why collectives take the usual path. flags: 0.
 * The buffer: inside one weft_mem_alloc block, or the program's own private memory
 * (malloc, new, mmap MAP_PRIVATE | MAP_ANONYMOUS: a tensor's storage, say), as
 * ncclCommRegister takes the user's buffers. Private memory is adopted: the whole pages
 * inside buff..buff+size move into a memfd mapped at the same address with the same
 * bytes (about one memcpy of size and its page faults, once), the partial pages at the
 * two ends stay private and are copied (at most 8 KiB) around each direct call
 * (mem/host_adopt.h). Until deregistration, do not free, realloc, munmap or madvise
 * such a buffer, and know that a child forked meanwhile shares those pages instead of
 * getting a copy; deregistration gives private pages back, with the latest bytes.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (NULL comm, buff or win; size 0; nonzero flags;
 * buff..buff+size neither inside one weft_mem_alloc block nor private memory (a file or
 * shared mapping, the stack), or overlapping another registered plain buffer without
 * lying inside it, or its pages could not be moved (memfd_create, mmap or mremap failed:
 * the rank's log says why): on any rank, named, and every rank returns the error),
 * WEFT_ERR_NO_MEMORY, WEFT_ERR_SYSTEM (mmap of a peer's buffer), and the errors of a
 * collective (it exchanges descriptors with one all-gather).
 * Thread safety: as a collective on comm; no thread may touch buff during the call.
 */
WEFT_API weft_status_t weft_comm_window_register(weft_comm_t comm, void *buff, size_t size,
                                                 weft_window_t *win, int flags);

/*
 * weft_comm_window_deregister: removes win from comm and unmaps the peers' buffers; an
 * adopted buffer (above) gets private pages back once no window of any communicator
 * holds it.
 * Collective (every rank, same order), so no peer still writes into the buffer when it
 * returns; synchronize the streams whose operations use the window first. NULL win is a
 * no-op. Errors: WEFT_ERR_INVALID_ARGUMENT (win not of comm), and
 * the errors of a collective (a barrier). Thread safety: as a collective on comm.
 */
WEFT_API weft_status_t weft_comm_window_deregister(weft_comm_t comm, weft_window_t win);

typedef struct weft_reg *weft_reg_t;

/*
 * weft_comm_register: registers buff (size bytes) with comm on this rank only, as NCCL's
 * ncclCommRegister: not collective, no message. A collective whose send and receive
 * buffers this rank registered (or registered as windows) and whose larger buffer holds
 * at least WEFT_DIRECT_MIN_BYTES bytes then runs the direct algorithm (algos/direct.c):
 * its peers map the registered buffer on first use and keep it mapped (16 registrations
 * per peer, the least recently used unmapped first), so a buffer used again costs no
 * system call. The buffer: inside one weft_mem_alloc block, or the program's own private
 * memory, adopted as weft_comm_window_register describes (same contract until
 * deregistration: no free, realloc, munmap or madvise; a fork shares its whole pages).
 * As NCCL requires, when any rank passes registered buffers to a collective, every rank
 * must: a rank that does not makes the call fail (a call mismatch on some rank, the
 * others then fail or time out naming it), never return wrong data. Where comm cannot run
 * direct collectives (one rank, ranks on several hosts or not over shm, WEFT_DIRECT=0) or
 * the buffer is not host memory (device memory), registration succeeds and changes
 * nothing. *handle: what weft_comm_deregister takes.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (NULL comm, buff or handle; size 0; host memory that
 * is neither from weft_mem_alloc nor private (a file or shared mapping, the stack), or
 * overlaps a registered plain buffer without lying inside it, or could not be shared:
 * the message says which), WEFT_ERR_NO_MEMORY, or the failure of a non-blocking init it
 * waits for. Thread-safe; no thread may touch buff during the call.
 */
WEFT_API weft_status_t weft_comm_register(weft_comm_t comm, void *buff, size_t size, weft_reg_t *handle);

/*
 * weft_comm_deregister: ends a registration of weft_comm_register (NULL handle: a no-op);
 * adopted memory gets private pages back once nothing holds it. Not collective: call it
 * when no operation using the buffer is in flight on this rank. Peers keep their mapping
 * of it until they evict it or comm is destroyed (the pages stay allocated until then).
 * Errors: WEFT_ERR_INVALID_ARGUMENT (NULL comm; handle not a registration of comm).
 * Thread-safe.
 */
WEFT_API weft_status_t weft_comm_deregister(weft_comm_t comm, weft_reg_t handle);

/* ------------------------------------------------------------------------------------
 * Streams: ordered queues of operations, run by the library's progress thread.
 * ------------------------------------------------------------------------------------ */

/*
 * weft_stream_create: a new stream with its own progress thread, which runs the
 * operations enqueued on it one after another, in order, while the caller goes on.
 * At most 1024 operations wait in a stream's queue: a call that would be the 1025th
 * waits until the thread has worked the queue down to 512, as a CUDA launch waits for
 * room in its stream (the operations' own deadlines bound that wait). The thread keeps
 * the records of operations it has run for the stream's next calls, at most 1024 (~660
 * KB); weft_stream_destroy frees them.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (stream NULL), WEFT_ERR_NO_MEMORY, WEFT_ERR_SYSTEM.
 * Thread-safe.
 */
WEFT_API weft_status_t weft_stream_create(weft_stream_t *stream);

/*
 * weft_stream_synchronize: waits until every operation enqueued on stream has
 * completed. Returns the first error any of them raised since the last
 * synchronize (and clears it), else WEFT_SUCCESS. The operations' own deadlines bound
 * the wait. Errors: WEFT_ERR_INVALID_ARGUMENT (stream NULL), or the operations' error.
 * Thread-safe.
 */
WEFT_API weft_status_t weft_stream_synchronize(weft_stream_t stream);

/*
 * weft_stream_query: WEFT_IN_PROGRESS while operations are queued or running, else as
 * weft_stream_synchronize (without waiting). Errors: WEFT_ERR_INVALID_ARGUMENT.
 * Thread-safe.
 */
WEFT_API weft_status_t weft_stream_query(weft_stream_t stream);

/*
 * weft_stream_destroy: synchronizes, stops the progress thread and frees the stream.
 * Returns what weft_stream_synchronize returned. Not thread-safe with other calls
 * on the same stream.
 */
WEFT_API weft_status_t weft_stream_destroy(weft_stream_t stream);

/* ------------------------------------------------------------------------------------
 * Collectives. Common to all:
 *   - Called by every rank of comm, in the same order, with the same count, datatype,
 *     op and root.
 *   - stream: the operation is enqueued and the call returns (after waiting for room
 *     when 1024 wait in the stream's queue: weft_stream_create); buffers must stay valid
 *     and untouched until the stream is synchronized. NULL: completes before return.
 *   - count == 0 is valid and moves nothing; buffers may then be NULL. It is still a
 *     call: every rank must make it (see the next point).
 *   - Ranks whose calls differ (another collective, count, datatype, op or root, or a
 *     call one rank makes and the others do not) fail with WEFT_ERR_INVALID_USAGE naming
 *     both ranks and both calls ("rank 1: call mismatch: all_reduce #7 (count 16, float,
 *     sum) does not match rank 0's all_reduce #7 (count 16, float, max) ..."): every
 *     message carries its call's fingerprint, checked by its receiver. A rank that
 *     receives nothing from a rank with another call fails when its wait times out
 *     (naming the peer), and one that only sends (a broadcast root) may return success
 *     with results right for its own call, its unreceived messages then failing the next
 *     call. WEFT_CHECK=1 makes every rank check every other's arguments before each
 *     collective, so that every rank of a mismatched call fails at once.
 *   - Errors returned at the call: WEFT_ERR_INVALID_ARGUMENT (NULL comm; NULL buffer
 *     with count > 0; count * element size overflowing size_t or the buffer extent;
 *     invalid datatype or op; root or peer outside [0, nranks)), WEFT_ERR_INVALID_USAGE
 *     (communicator aborted or in error; ranks' calls that do not match, see above).
 *     With a NULL stream also the errors of the
 *     transfer: WEFT_ERR_REMOTE (a peer failed or exited: the message names it),
 *     WEFT_ERR_TIMEOUT (a peer did not answer within the deadline), WEFT_ERR_ABORTED,
 *     WEFT_ERR_SYSTEM. On a stream those are reported by weft_stream_synchronize.
 *   - In-place: pass the same pointer (or the documented offset) for send and receive.
 *   - Thread safety: see the top of this file.
 * ------------------------------------------------------------------------------------ */

/*
 * weft_all_reduce: recvbuf[i] = op over ranks r of sendbuf_r[i], for i < count.
 * sendbuf, recvbuf: count elements each; in-place when sendbuf == recvbuf.
 */
WEFT_API weft_status_t weft_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                       weft_datatype_t datatype, weft_redop_t op,
                                       weft_comm_t comm, weft_stream_t stream);

/*
 * weft_broadcast: every rank's recvbuf = root's sendbuf (count elements each).
 * sendbuf is read on root only; in-place when sendbuf == recvbuf on root.
 */
WEFT_API weft_status_t weft_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                      weft_datatype_t datatype, int root, weft_comm_t comm,
                                      weft_stream_t stream);

/*
 * weft_reduce: root's recvbuf[i] = op over ranks of sendbuf_r[i]. sendbuf: count
 * elements on every rank; recvbuf: count elements, used on root only (may be NULL
 * elsewhere); in-place when sendbuf == recvbuf on root.
 */
WEFT_API weft_status_t weft_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                   weft_datatype_t datatype, weft_redop_t op, int root,
                                   weft_comm_t comm, weft_stream_t stream);

/*
 * weft_all_gather: recvbuf[r * sendcount + i] = sendbuf_r[i]. sendbuf: sendcount
 * elements; recvbuf: nranks * sendcount elements; in-place when
 * sendbuf == recvbuf + rank * sendcount (in bytes of the datatype).
 */
WEFT_API weft_status_t weft_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                       weft_datatype_t datatype, weft_comm_t comm,
                                       weft_stream_t stream);

/*
 * weft_reduce_scatter: recvbuf[i] = op over ranks r of sendbuf_r[rank * recvcount + i].
 * sendbuf: nranks * recvcount elements; recvbuf: recvcount elements; in-place when
 * recvbuf == sendbuf + rank * recvcount.
 */
WEFT_API weft_status_t weft_reduce_scatter(const void *sendbuf, void *recvbuf,
                                           size_t recvcount, weft_datatype_t datatype,
                                           weft_redop_t op, weft_comm_t comm,
                                           weft_stream_t stream);

/*
 * weft_all_to_all: recvbuf[p * count + i] = sendbuf_p[rank * count + i]: block p of
 * my sendbuf goes to rank p. sendbuf and recvbuf: nranks * count elements each;
 * in-place when equal (weft then stages a copy of the send data).
 */
WEFT_API weft_status_t weft_all_to_all(const void *sendbuf, void *recvbuf, size_t count,
                                       weft_datatype_t datatype, weft_comm_t comm,
                                       weft_stream_t stream);

/*
 * weft_all_to_allv: block p of sendbuf (sendcounts[p] elements at element offset
 * sdispls[p]) goes to rank p, which stores it at recvbuf + rdispls[rank] (recvcounts[rank]
 * elements there). The four arrays have nranks entries, in elements; they are copied
 * before the call returns. recvcounts[p] must equal what rank p sends to us (a mismatch is
 * an error on the receiver naming both sizes). Not in-place: sendbuf and recvbuf extents
 * must not overlap. Further errors: WEFT_ERR_INVALID_ARGUMENT (a NULL array; an extent
 * that overflows).
 */
WEFT_API weft_status_t weft_all_to_allv(const void *sendbuf, const size_t *sendcounts,
                                        const size_t *sdispls, void *recvbuf,
                                        const size_t *recvcounts, const size_t *rdispls,
                                        weft_datatype_t datatype, weft_comm_t comm,
                                        weft_stream_t stream);

/*
 * weft_gather: root's recvbuf[r * sendcount + i] = sendbuf_r[i]. sendbuf: sendcount
 * elements on every rank; recvbuf: nranks * sendcount elements, used on root only (may be
 * NULL elsewhere); in-place on root when sendbuf == recvbuf + root * sendcount.
 */
WEFT_API weft_status_t weft_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                   weft_datatype_t datatype, int root, weft_comm_t comm,
                                   weft_stream_t stream);

/*
 * weft_scatter: every rank's recvbuf[i] = root's sendbuf[rank * recvcount + i]. sendbuf:
 * nranks * recvcount elements, read on root only (may be NULL elsewhere); recvbuf:
 * recvcount elements; in-place on root when recvbuf == sendbuf + root * recvcount.
 */
WEFT_API weft_status_t weft_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                    weft_datatype_t datatype, int root, weft_comm_t comm,
                                    weft_stream_t stream);

/*
 * weft_barrier: returns (NULL stream) or completes (stream) only after every rank of comm
 * has entered it. Errors: as the collectives above.
 */
WEFT_API weft_status_t weft_barrier(weft_comm_t comm, weft_stream_t stream);

/*
 * weft_send / weft_recv: point-to-point. The i-th send from a to b matches the i-th
 * recv on b from a, and their sizes in bytes must agree (a mismatch is an error on
 * the receiver naming both sizes: "recv #3 from rank 0 (80 bytes) does not match rank
 * 0's send #3 to rank 1 (40 bytes)", numbered per pair; a send met by a collective is
 * an error too). Outside a group each call completes on its own, so
 * two ranks that both send first need weft_group_start/end around send and recv.
 * A rank may send to itself only within a group that also holds the matching recv.
 * A send completes once its bytes have left sendbuf: copied into the transport's buffer,
 * or read by the receiver itself (shm's single copy, which the sends of a group that
 * also receives may take), so do not rely on a large send completing before its recv is
 * posted. Within a group, a recv into bytes that a send of the same group reads is a
 * race, as in NCCL and MPI_Sendrecv: weft then keeps that send on two copies, but which
 * bytes it carries is not defined. sendbuf / recvbuf: count elements.
 */
WEFT_API weft_status_t weft_send(const void *sendbuf, size_t count, weft_datatype_t datatype,
                                 int peer, weft_comm_t comm, weft_stream_t stream);
WEFT_API weft_status_t weft_recv(void *recvbuf, size_t count, weft_datatype_t datatype,
                                 int peer, weft_comm_t comm, weft_stream_t stream);

/*
 * weft_group_start / weft_group_end: calls made by this thread between them are only
 * checked and recorded; weft_group_end launches them together: all sends and
 * receives of the group progress at once (so any exchange pattern is free of
 * deadlock), collectives run in call order. Groups nest; the outermost end launches.
 * All calls of a group must use the same stream.
 * Errors (group_end): WEFT_ERR_INVALID_USAGE (end without start, mixed streams, an
 * unmatched send to self), then the errors of the recorded calls. On error the
 * whole group is discarded. Per-thread state: thread-safe.
 */
WEFT_API weft_status_t weft_group_start(void);
WEFT_API weft_status_t weft_group_end(void);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_H */

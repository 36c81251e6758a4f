/* harness.h: runs a test body as N real rank processes, for the cmocka tests of weft.
 *
 * Why processes and not threads: the transports (memfd shared memory, sockets) and the
 * failure detection (a peer that exits) are only exercised for real across processes.
 *
 * The cmocka test (the parent) forks the ranks, has the unique id created (its bootstrap root
 * thread lives in a child "root host", so the parent stays single-threaded for its forks) and
 * hands it to them through a socketpair, then waits for all of
 * them with a deadline: ranks still running then are killed and named as hung. Each rank
 * process sets WEFT_TRANSPORT (and WEFT_CHUNK_BYTES when asked), initializes its
 * communicator, runs the body, destroys the communicator and _exits with its number of
 * failed checks (capped at 100). Ranks never use cmocka assertions (a failing assert in a
 * forked child would longjmp into the copy of the runner): they print a precise diagnostic
 * to stderr, prefixed "# rank R:", and count the failure with harness_fail(). */
#ifndef WEFT_TESTS_HARNESS_H
#define WEFT_TESTS_HARNESS_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "weft.h"

#define HARNESS_MAX_RANKS 16
#define HARNESS_DEFAULT_TIMEOUT_MS 20000
#define HARNESS_DEFAULT_DEADLINE_S 120

/* A page shared by the ranks of one run (MAP_SHARED before the fork), for the few tests
 * that must order events across ranks outside weft (e.g. "exit only after the peer saw
 * the error"). */
typedef struct {
  atomic_int flags[64];
  atomic_llong values[64];
} harness_shared;

typedef struct {
  int rank;
  int nranks;
  weft_comm_t comm;        /* ready communicator; NULL when opts.no_init. A body that
                              aborts or destroys it must set it to NULL. */
  weft_unique_id_t id;     /* the id of this run (the body may alter its copy) */
  weft_config_t config;    /* the config used for init (timeout set from opts) */
  const char *transport;   /* "shm", "socket" or NULL */
  void *arg;               /* the test's argument */
  harness_shared *shared;
  weft_status_t init_status; /* what init returned (opts.nonblocking: IN_PROGRESS or SUCCESS) */
  int failures;            /* failed checks so far */
} harness_rank;

/* Runs on each rank; returns its number of failures (usually r->failures). */
typedef int (*harness_body_fn)(harness_rank *r);

typedef struct {
  int nranks;
  const char *transport;      /* "shm", "socket", or NULL to leave WEFT_TRANSPORT alone */
  size_t chunk_bytes;         /* WEFT_CHUNK_BYTES for the ranks; 0 leaves it alone */
  int timeout_ms;             /* the communicator's timeout; 0: HARNESS_DEFAULT_TIMEOUT_MS */
  int nonblocking;            /* init with config.blocking = 0: r->comm is set while init
                                 may still run (r->init_status says what init returned) */
  int deadline_s;             /* the parent's wait for all ranks; 0: HARNESS_DEFAULT_DEADLINE_S */
  int no_init;                /* the body initializes the communicator itself */
  const weft_unique_id_t *id; /* NULL: a fresh weft_get_unique_id() of the parent */
  unsigned may_be_killed;     /* bit r: rank r may end by SIGKILL (failure tests) */
} harness_opts;

/* Runs body on opts->nranks rank processes and fails the current cmocka test (in the
 * parent) unless every rank exited 0 (or was killed as allowed) before the deadline. */
void harness_run(const harness_opts *opts, harness_body_fn body, void *arg);

/* In the test program (the parent): a fresh unique id whose bootstrap root runs in a child
 * process kept until exit, so the parent stays single-threaded and may fork ranks (a
 * weft_get_unique_id of the parent would start a root thread there). Fails the cmocka test
 * when no id can be made. */
void harness_unique_id(weft_unique_id_t *id);

/* For tests that run the ib transport: points weft at the verbs emulator
 * (WEFT_TOP_BUILDDIR/tests/verbs_emu, WEFT_IB_LIBRARY) with a fresh state directory
 * /dev/shm/weft-<tag>-emu-XXXXXX (WEFT_VERBS_EMU_DIR) and WEFT_IB_TIMEOUT=14 (67 ms per
 * transport retry). Returns 1, or 0 when the emulator is not built (the ib cases then skip).
 * harness_verbs_emu_teardown removes the directory. Not thread-safe: call from main. */
int harness_verbs_emu_setup(const char *tag);
void harness_verbs_emu_teardown(void);

/* Sleeps ms milliseconds (nanosleep; an interrupting signal cuts it short). Thread-safe. */
void harness_sleep_ms(int ms);

/* Threads of this process (from /proc/self/status); -1 when unknown. */
int harness_thread_count(void);

/* In main, before cmocka_run_group_tests: runs only the tests whose name matches the
 * pattern in WEFT_TEST_FILTER ("*" wildcards), when it is set. */
void harness_filter_from_env(void);

/* Shorthand: nranks over transport with the defaults. */
void harness_run_simple(int nranks, const char *transport, harness_body_fn body, void *arg);

/* In a rank of a harness_opts.no_init run: creates r->comm as a rank of emulated host
 * hosts[rank] (WEFT_HOSTID: ranks with the same letter share memory, the others use
 * sockets, as on separate machines). Returns 0, or the failure count. */
int harness_init_on_emulated_host(harness_rank *r, const char *hosts);

/* In a rank: prints "# rank R: <message>" to stderr and counts a failure. Returns 0 so
 * checks read `if (!cond) return harness_fail(...)`-style when convenient. */
int harness_fail(harness_rank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* In a rank: a diagnostic line without counting a failure. */
void harness_note(harness_rank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* In a rank: checks st == want; on mismatch reports what (e.g. "all_reduce float32 sum
 * count 7"), both status names and weft_get_last_error(r->comm). Returns 1 when equal. */
int harness_expect_status(harness_rank *r, weft_status_t st, weft_status_t want,
                          const char *what);

/* Monotonic milliseconds, for timing checks. */
double harness_now_ms(void);

/* Waits (sleeping) until shared->flags[idx] >= value or timeout_ms passes; 1 on success. */
int harness_wait_flag(harness_rank *r, int idx, int value, int timeout_ms);

/* 1 when msg names rank `rank` as a rank or peer: a whole-number token equal to rank
 * preceded, within a few words, by "rank", "peer" or "missing". */
int harness_names_rank(const char *msg, int rank);

/* Elements, for the tests' own references: bytes per element, names as in messages
 * ("float32", "sum"), and small integers stored in / loaded from any datatype (fp16 and
 * bf16 through mem/kernels.h's round-to-nearest-even conversions). */
size_t harness_esize(weft_datatype_t dt);
const char *harness_dt_name(weft_datatype_t dt);
const char *harness_op_name(weft_redop_t op);
void harness_store(void *p, size_t i, weft_datatype_t dt, long v);
double harness_load(const void *p, size_t i, weft_datatype_t dt);

/* ---- buffers with guard bytes on both sides, and cross-rank checks ----------------------
 * A guarded buffer has HARNESS_GUARD bytes of HARNESS_GUARD_BYTE before and after its
 * `bytes` usable bytes (filled with `fill`), so a write before the start (a negative offset,
 * a wrong displacement) is caught as well as one past the end. Never NULL, even for 0 bytes.
 * After harness_use_guarded_memory(1) (in a rank), these buffers come from the guarded
 * memory space (mem/guarded.h): weft faults on any direct touch, and the test itself reads
 * and writes them only through harness_view. */
#define HARNESS_GUARD 64
#define HARNESS_GUARD_BYTE 0xC3
uint8_t *harness_guarded_alloc(size_t bytes, uint8_t fill);
void harness_guarded_free(uint8_t *buf);
/* Checks both guards of buf (bytes usable bytes); reports the first overwritten byte with
 * desc and returns 0 when one was. */
int harness_guarded_check(harness_rank *r, const uint8_t *buf, size_t bytes, const char *desc);
/* Whether harness_guarded_alloc hands out guarded-space memory (0: host memory). */
void harness_use_guarded_memory(int on);
int harness_guarded_memory(void);
/* Where the test reads and writes bytes [p, p + bytes) of a buffer it gave weft: p itself
 * for host memory, the guarded space's host view for guarded memory. */
uint8_t *harness_view(const void *p, size_t bytes);

/* FNV-1a, 64 bits, over bytes (seeded with `seed`; 0 for the standard offset basis). */
uint64_t harness_hash(const void *p, size_t bytes, uint64_t seed);

/* Collective over r->comm: all-gathers every rank's 64-bit value h (as weft_all_gather of
 * 8 uint8s) into all[0..nranks). Returns 0 (counting a failure, naming desc) when the
 * all-gather itself fails. all must hold nranks values. */
int harness_all_gather_u64(harness_rank *r, uint64_t h, uint64_t *all, const char *desc);

/* Collective: 1 when every rank passed the same h (a result that must be bitwise identical
 * on every rank); else reports which ranks differ from rank 0 and returns 0. */
int harness_same_on_all_ranks(harness_rank *r, uint64_t h, const char *desc);

/* "WEFT_ERR_TIMEOUT"-style name of a status, for diagnostics. */
const char *harness_status_name(weft_status_t st);
/* 1 for the signed datatypes (including the floating-point ones). */
int harness_dtype_signed(weft_datatype_t dt);

/* The input element j of rank `rank` for a reduction by op: small integers chosen so every
 * partial result of up to 8 ranks is exact in every datatype (sums stay within bf16's 8-bit
 * mantissa, products are at most a few powers of two), negative ones only where dt is signed.
 * Periodic in j with period lcm(9, 8, 5, 11) = 3960. */
long harness_red_value(weft_redop_t op, weft_datatype_t dt, int rank, size_t j);

#endif

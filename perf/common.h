/*
 * common.h: the shared harness of weft's nccl-tests-compatible benchmarks
 * (all_reduce_perf, and siblings such as all_gather_perf or broadcast_perf).
 *
 * A benchmark program only describes its collective with a perf_coll_t and calls
 * perf_main(); the harness does everything else exactly as nccl-tests does: the same
 * flags, the same output, timing, validation on a separate iteration and the
 * "# Avg bus bandwidth" footer, and -J FILE writes nccl-tests' JSON document (perf/sweep.c,
 * perf/options.c, perf/output.c). Ranks are processes started by weftrun, mpirun, srun or
 * torchrun (alone: one rank); each joins with weft_comm_init_from_env(). Beyond nccl-tests,
 * -L 1 adds p50/p99 latency of single calls to each row.
 *
 * Validation needs results that are exact in every datatype. perf_input_value() gives
 * each (rank, element) a small value chosen per op so that the reduction over up to 32
 * ranks is exactly representable even in int8 and bfloat16, and perf_reduce_value()
 * computes the exact result with the datatype's own arithmetic.
 */
#ifndef WEFT_PERF_COMMON_H
#define WEFT_PERF_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* Element counts of one collective call, as nccl-tests' getCollByteCount. */
typedef struct {
  size_t sendcount;           /* elements of each rank's send buffer */
  size_t recvcount;           /* elements of each rank's receive buffer */
  size_t paramcount;          /* the count argument of the call */
  size_t send_inplace_offset; /* in-place: send = recv + this * rank (elements) */
  size_t recv_inplace_offset; /* in-place: recv = recv + this * rank (elements) */
} perf_counts_t;

/* What the collective-specific callbacks get. */
typedef struct {
  weft_datatype_t type;
  weft_redop_t op; /* meaningful when the collective reduces */
  int root;        /* meaningful when the collective is rooted; else -1 */
  int rank;
  int nranks;
  perf_counts_t counts;
} perf_call_t;

typedef struct {
  const char *name; /* "all_reduce" */
  int has_op;       /* prints and loops over -o; otherwise the op column is "none" */
  int has_root;     /* prints and loops over -r (-r -1 or all: every root); else root -1 */
  int inplace_unchecked; /* in-place is timed but not validated ("N/A"), as nccl-tests
                            does for sendrecv, whose in-place form races by design */
  /* count: size / element size, the total nccl-tests derives from -b/-e. */
  void (*get_counts)(size_t count, int nranks, perf_counts_t *counts);
  /* busbw = algbw * busbw_factor(nranks), as nccl-tests' PERFORMANCE.md derives it. */
  double (*busbw_factor)(int nranks);
  /* Fills this rank's send buffer (counts.sendcount elements). */
  void (*fill_input)(const perf_call_t *call, void *sendbuf);
  /* Writes what this rank's receive buffer must hold; returns how many elements (from
   * the start of recvbuf, or of the in-place receive region) to compare. */
  size_t (*expected)(const perf_call_t *call, void *expected);
  /* Issues the collective: on stream, or blocking when stream is NULL. */
  weft_status_t (*run)(const perf_call_t *call, const void *sendbuf, void *recvbuf,
                       weft_comm_t comm, weft_stream_t stream);
} perf_coll_t;

/* Parses nccl-tests' flags, runs the benchmark, returns the process exit status. */
int perf_main(int argc, char **argv, const perf_coll_t *coll);

/* ---- element helpers, for the callbacks ---- */

/* buf[i] = v, converted to type (fp16/bf16 round to nearest-even; integers wrap). */
void perf_store(void *buf, size_t i, weft_datatype_t type, double v);
/* buf[i] as a double (exact for every type but the largest 64-bit integers). */
double perf_load(const void *buf, size_t i, weft_datatype_t type);

/* The input rank gives element i for a reduction with op: small integers, negative
 * ones for signed types under min/max; prod uses only 1 and 2, with at most three 2s
 * per element over 32 ranks, so every result is exact in every type. */
double perf_input_value(weft_datatype_t type, weft_redop_t op, int rank, size_t i);
/* op over ranks 0..nranks-1 of perf_input_value(type, op, r, i), computed with the
 * datatype's arithmetic (integer wrap, avg truncating or rounding as weft does). */
double perf_reduce_value(weft_datatype_t type, weft_redop_t op, int nranks, size_t i);

/* buf[i] = perf_input_value(type, op, rank, first + i) /
 * perf_reduce_value(type, op, nranks, first + i) for i < n. first is the element index
 * of buf[0] in the rank's whole buffer (reduce_scatter checks block `rank`). Fast: the
 * values repeat with a short period, which is computed once and copied. */
void perf_fill_input(void *buf, size_t n, weft_datatype_t type, weft_redop_t op, int rank,
                     size_t first);
void perf_fill_reduced(void *buf, size_t n, weft_datatype_t type, weft_redop_t op, int nranks,
                       size_t first);

/* A value for element i of rank's data in collectives that only move data: distinct
 * per rank and element, exact in every type. */
double perf_move_value(weft_datatype_t type, int rank, size_t i);
/* buf[i] = perf_move_value(type, rank, first + i) for i < n, as fast as the fills above. */
void perf_fill_moved(void *buf, size_t n, weft_datatype_t type, int rank, size_t first);
/* buf + i elements of type, for the callbacks' block arithmetic. */
void *perf_elem(void *buf, size_t i, weft_datatype_t type);

#endif

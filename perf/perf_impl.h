/*
 * perf_impl.h: the parts of the perf harness behind perf_main() (perf/common.h): options
 * (perf/options.c), the sweep and timing (perf/sweep.c), and nccl-tests' output, text and
 * JSON (perf/output.c). Internal to the perf programs.
 */
#ifndef WEFT_PERF_IMPL_H
#define WEFT_PERF_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "perf/common.h"

/* nccl-tests' flags, with its defaults (src/common.cu), plus weft's -L. */
typedef struct {
  size_t minbytes, maxbytes, stepbytes, stepfactor;
  int iters, warmup, agg;
  int check;         /* -c: number of check iterations (0: none) */
  int blocking;      /* -z: 0 stream; 1 wait + barrier per call; 2 wait; 3 wait per -n
                        iteration, barrier after it, excluded from the time */
  int stream_null;   /* -y: calls on the NULL stream (blocking), no barrier */
  int average, cputime, timeout_s, run_cycles, timestamps, unalign, memory_report;
  int per_iter, per_iter_skip; /* -I, -K */
  int latency;       /* -L (weft): p50/p99 of single blocking calls */
  int parallel_init; /* -p: accepted; ranks are processes, always in parallel */
  int local_register; /* -R: 0 plain; 1 weft_mem_alloc; 2 + registered windows */
  int buffers;       /* -B (weft): -1 auto (a GPU's memory where there is one), 0 host, 1 device */
  int type, op, root; /* -1: all */
  const char *json_path; /* -J: NULL for none */
} perf_opts_t;

/* One half of a result row (out-of-place or in-place). */
typedef struct {
  double usec, algbw, busbw;
  int64_t wrong;
  int checked; /* 0: wrong is "N/A" */
} perf_result_t;

/* Per-iteration figures (-I), in seconds, after the max over ranks per iteration. */
typedef struct {
  double min, max, avg, p50, p95, p99, stdev;
  int n, skipped;
  const double *times; /* every iteration, skipped ones included */
} perf_iter_stats_t;

typedef struct perf_json perf_json_t;

typedef struct {
  const perf_coll_t *coll;
  const char *prog;
  int argc;
  char **argv;
  perf_opts_t o;
  weft_comm_t comm;
  weft_stream_t stream; /* NULL when calls block (-z, -y) */
  int rank, nranks;
  char *sendbuf, *recvbuf, *expected;
  int on_device;       /* the send and receive buffers are device memory (-B, perf/device.h) */
  int device;          /* its CUDA ordinal */
  char device_desc[64]; /* "[pci bus id] name" */
  char *hsend, *hrecv; /* on_device: host copies of the buffers, for filling and checking */
  size_t recvbytes, bufbytes; /* bufbytes: the send and receive buffers (with -u padding) */
  double bw_sum;
  int bw_count;
  int errors; /* results with at least one wrong element, summed over ranks */
  int nhosts; /* distinct hostnames among the ranks */
  perf_json_t *json; /* -J document, rank 0 only */
  double *lat;  /* o.iters per-call latencies (s): -L pass */
  double *iter; /* o.iters per-iteration times (s): -I */
  long mem_init, mem_buffers, mem_coll; /* -M: bytes of resident memory grown by each */
} perf_ctx_t;

extern const char *const perf_type_names[WEFT_NUM_DATATYPES];
extern const char *const perf_op_names[WEFT_NUM_OPS];

/* ---- options.c ---- */
void perf_default_opts(perf_opts_t *o);
/* Parses argv into c->o; -1 to go on, else the exit status. */
int perf_parse_args(int argc, char **argv, perf_ctx_t *c);
/* The launcher's rank before weft knows it (only rank 0 prints usage errors); -1: none. */
int perf_env_rank(void);

/* ---- output.c: nccl-tests' text ---- */
/* value in width characters: %.2f, else %.1f, else %.0f, else exponent (nccl-tests). */
void perf_float_str(double value, int width, char *out);
void perf_print_header(perf_ctx_t *c); /* version, options, "# Using devices" */
void perf_print_device(const char *line); /* one "#  Rank ..." line */
void perf_print_columns(perf_ctx_t *c);
void perf_print_row_start(perf_ctx_t *c, size_t bytes, size_t count, const char *type,
                          const char *op, int root);
void perf_print_result(perf_ctx_t *c, const perf_result_t *r, int out_of_place);
void perf_print_iter_stats(perf_ctx_t *c, const perf_iter_stats_t *s, int out_of_place);
void perf_print_row_end(perf_ctx_t *c, double p50, double p99, const char *algorithm);
void perf_print_footer(perf_ctx_t *c, double avg_bw, double min_bw);

/* ---- output.c: the -J document (nccl-tests' keys; weft's own under "weft") ---- */
/* Opens path as nccl-tests does ("wx"; path.0, path.1, ... when it exists) and starts
 * the document; NULL (after a "# skipping json output" line) when it cannot. */
perf_json_t *perf_json_open(const char *path, int argc, char **argv);
void perf_json_config(perf_json_t *j, const perf_ctx_t *c);
void perf_json_device(perf_json_t *j, int rank, int pid, const char *host, int device,
                      const char *info);
void perf_json_results_start(perf_json_t *j);
void perf_json_row_start(perf_json_t *j, size_t bytes, size_t count, const char *type,
                         const char *op, int root);
void perf_json_result(perf_json_t *j, const perf_result_t *r, int cputime, int out_of_place);
void perf_json_iter_stats(perf_json_t *j, const perf_iter_stats_t *s, int out_of_place);
void perf_json_row_end(perf_json_t *j, int iters, const char *algorithm, int latency, double p50,
                       double p99);
/* Closes results, writes out_of_bounds, average_bus_bandwidth, errors, end_time; frees j. */
void perf_json_close(perf_json_t *j, int errors, double avg_bw, double min_bw,
                     const char *last_error);

#endif

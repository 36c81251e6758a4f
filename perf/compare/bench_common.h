/*
 * bench_common.h: the library-independent half of the peer harnesses that `make compare`
 * runs next to weft's perf tools (mpi_bench.c over Open MPI, gloo_bench.cc over Gloo).
 *
 * Why a harness of our own: the comparison is only fair when every library is asked the
 * same question, so both harnesses do exactly what weft's perf/common.c does for
 * float32/sum, out-of-place:
 *   - sizes as nccl-tests counts them (`size` is the larger of the send and receive
 *     buffer: all_gather's and gather's output, reduce_scatter's and scatter's input,
 *     all_to_all's whole buffer, what reduce and sendrecv send; per-rank blocks are
 *     size / 4 / nranks floats, rounded down), -b MIN -e MAX -f F;
 *   - rooted collectives (broadcast, reduce, gather, scatter) have root 0; sendrecv is a
 *     ring shift: each rank sends to rank+1 and receives from rank-1 (mod n), in one call;
 *   - warm-up: -w calls at the largest and at the smallest size, then one untimed call
 *     per size, a barrier, -n timed back-to-back calls;
 *   - time = mean per call, averaged over ranks (weft's `-a 1`), with no clock read inside
 *     the loop; p50/p99 of up to 200 more calls timed one by one, averaged over ranks;
 *     algbw = size / time (GB/s = 1e9 B/s);
 *     busbw = algbw * factor, with nccl-tests' factors: all_reduce 2(n-1)/n,
 *     all_gather / reduce_scatter / all_to_all / gather / scatter (n-1)/n, broadcast /
 *     reduce / sendrecv 1;
 *   - a separate checked call on fresh inputs (receive buffer poisoned first) whose wrong
 *     elements are summed over ranks. Values are small integers, so float sums are exact
 *     and every element is compared bit for bit. Reduce and gather leave a result at the
 *     root only: only the root's is checked (the other ranks count 0 wrong); scatter's
 *     rank r must hold block r of the root's buffer, sendrecv's the data of rank r-1.
 *     The values are perf/common.c's for float32/sum (perf_input_value, perf_move_value).
 * Rank 0 prints one JSON object per size on stdout (see bc_print_row); report.py reads them.
 *
 * Each harness supplies only the library calls (bc_lib_t). Everything here is `static`
 * so the header compiles as C (mpicc) and as C++ (g++) without a library of its own.
 */
#ifndef WEFT_COMPARE_BENCH_COMMON_H
#define WEFT_COMPARE_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* Named as weft's perf tools, less "_perf" (all_to_all's tool is alltoall_perf). */
typedef enum { BC_ALL_REDUCE, BC_ALL_GATHER, BC_REDUCE_SCATTER, BC_ALL_TO_ALL, BC_BROADCAST,
               BC_REDUCE, BC_GATHER, BC_SCATTER, BC_SENDRECV, BC_NUM_COLLS } bc_coll_t;

static const char *const bc_coll_names[BC_NUM_COLLS] = {
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
    "reduce",     "gather",     "scatter",        "sendrecv"};

typedef struct {
  bc_coll_t coll;
  size_t minbytes, maxbytes, factor;
  int iters, warmup, check;
  const char *transport; /* only printed: how the launcher set the library up */
} bc_opts_t;

/* Element counts of one call (floats). */
typedef struct {
  size_t sendcount, recvcount;
  size_t block; /* per-rank block: all_gather, reduce_scatter, all_to_all, gather, scatter */
  size_t bytes; /* nccl-tests' size: 4 * max(sendcount, recvcount) */
} bc_counts_t;

/* What a harness provides. `run` issues one blocking call with the given buffers and
 * returns where this rank's result is (usually recv; Gloo's reduce-scatter and MPI's
 * broadcast root leave it in send; reduce and gather off the root, which have none: recv,
 * unchecked). `prepare` (may be NULL) is called once per size before any call of that
 * size, outside the timing. `sum` adds n doubles over ranks in place. */
typedef struct {
  void *ctx;
  int rank, nranks;
  const char *name; /* "mpi", "gloo" */
  void (*prepare)(void *ctx, bc_coll_t coll, const bc_counts_t *c, float *send, float *recv);
  const float *(*run)(void *ctx, bc_coll_t coll, const bc_counts_t *c, float *send,
                      float *recv);
  void (*barrier)(void *ctx);
  void (*sum)(void *ctx, double *v, int n);
} bc_lib_t;

/* ---- sizes and factors ---- */

static void bc_counts(bc_coll_t coll, size_t size, int nranks, bc_counts_t *c) {
  size_t count = size / sizeof(float), n = (size_t)nranks;
  memset(c, 0, sizeof(*c));
  switch (coll) {
  case BC_ALL_REDUCE:
  case BC_BROADCAST:
  case BC_REDUCE:
  case BC_SENDRECV: c->sendcount = c->recvcount = count; break;
  case BC_ALL_GATHER:
  case BC_GATHER: c->block = count / n; c->sendcount = c->block; c->recvcount = c->block * n; break;
  case BC_REDUCE_SCATTER:
  case BC_SCATTER: c->block = count / n; c->sendcount = c->block * n; c->recvcount = c->block; break;
  case BC_ALL_TO_ALL: c->block = count / n; c->sendcount = c->recvcount = c->block * n; break;
  default: break;
  }
  c->bytes = sizeof(float) * (c->sendcount > c->recvcount ? c->sendcount : c->recvcount);
}

static double bc_busbw_factor(bc_coll_t coll, int nranks) {
  if (coll == BC_ALL_REDUCE)
    return 2.0 * (nranks - 1) / nranks;
  if (coll == BC_BROADCAST || coll == BC_REDUCE || coll == BC_SENDRECV)
    return 1.0;
  return (double)(nranks - 1) / nranks; /* the gathers, scatters and all_to_all */
}

/* ---- values: exact small integers ---- */

/* Input of rank r at element i of a reduction: 0..3, so any sum over ranks is exact. */
static float bc_reduce_in(int r, size_t i) { return (float)(((size_t)r * 3 + i * 7) % 4); }

/* Data of rank r at element i in collectives that only move data: distinct per rank. */
static float bc_move_in(int r, size_t i) { return (float)((long)(((size_t)r * 31 + i * 7) % 113) - 56); }

/* sum over ranks of bc_reduce_in(r, i): it only depends on i % 4. */
static float bc_reduce_out(int nranks, size_t i) {
  float s = 0;
  for (int r = 0; r < nranks; r++)
    s += bc_reduce_in(r, i % 4);
  return s;
}

static void bc_fill_input(bc_coll_t coll, int rank, const bc_counts_t *c, float *send) {
  size_t i;
  switch (coll) {
  case BC_ALL_REDUCE:
  case BC_REDUCE_SCATTER:
  case BC_REDUCE:
    for (i = 0; i < c->sendcount; i++) send[i] = bc_reduce_in(rank, i);
    break;
  case BC_ALL_GATHER: /* rank's block; in all_to_all block d goes to rank d */
  case BC_ALL_TO_ALL:
  case BC_GATHER:
  case BC_SENDRECV:
    for (i = 0; i < c->sendcount; i++) send[i] = bc_move_in(rank, i);
    break;
  case BC_BROADCAST: /* root 0 */
    for (i = 0; i < c->sendcount; i++) send[i] = rank == 0 ? bc_move_in(0, i) : -1.0f;
    break;
  case BC_SCATTER: /* only the root's buffer is read, as weft's scatter_perf fills it */
    for (i = 0; i < c->sendcount && rank == 0; i++) send[i] = bc_move_in(0, i);
    break;
  default: break;
  }
}

/* What element i of rank's result must be. */
static float bc_expected(bc_coll_t coll, int rank, int nranks, const bc_counts_t *c, size_t i) {
  size_t b = c->block;
  switch (coll) {
  case BC_ALL_REDUCE:
  case BC_REDUCE: return bc_reduce_out(nranks, i);
  case BC_REDUCE_SCATTER: return bc_reduce_out(nranks, (size_t)rank * b + i);
  case BC_ALL_GATHER:
  case BC_GATHER: return bc_move_in((int)(i / b), i % b);
  case BC_ALL_TO_ALL: return bc_move_in((int)(i / b), (size_t)rank * b + i % b);
  case BC_BROADCAST: return bc_move_in(0, i);
  case BC_SCATTER: return bc_move_in(0, (size_t)rank * b + i);
  case BC_SENDRECV: return bc_move_in((rank - 1 + nranks) % nranks, i);
  default: return 0;
  }
}

/* How many elements of rank's result are checked: none where the collective leaves no
 * result (reduce and gather off the root, as weft's perf tools check them). */
static size_t bc_checked_count(bc_coll_t coll, int rank, const bc_counts_t *c) {
  return (coll == BC_REDUCE || coll == BC_GATHER) && rank != 0 ? 0 : c->recvcount;
}

static int64_t bc_count_wrong(bc_coll_t coll, int rank, int nranks, const bc_counts_t *c,
                              const float *result) {
  int64_t wrong = 0;
  for (size_t i = 0; i < bc_checked_count(coll, rank, c); i++) {
    float want = bc_expected(coll, rank, nranks, c, i);
    wrong += memcmp(&result[i], &want, sizeof(want)) != 0;
  }
  return wrong;
}

/* ---- options ---- */

/* "64", "1K", "32M", "1G" (powers of 1024), as nccl-tests. */
static int bc_parse_size(const char *s, size_t *out) {
  char *end;
  double v = strtod(s, &end), unit = 1;
  if (end == s || v < 0)
    return -1;
  if (*end == 'K' || *end == 'k') unit = 1024.0, end++;
  else if (*end == 'M' || *end == 'm') unit = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g') unit = 1024.0 * 1024 * 1024, end++;
  if (*end)
    return -1;
  *out = (size_t)(v * unit);
  return 0;
}

static void bc_usage(const char *prog) {
  fprintf(stderr, "usage: %s all_reduce|all_gather|reduce_scatter|all_to_all|broadcast|"
                  "reduce|gather|scatter|sendrecv [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] "
                  "[-w WARMUP] [-c 0|1] [-t TRANSPORT-LABEL]\n", prog);
}

/* Returns 0, or prints usage and returns -1. */
static int bc_parse_args(int argc, char **argv, bc_opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->minbytes = 8, o->maxbytes = 32u << 20, o->factor = 2, o->iters = 20, o->warmup = 5;
  o->check = 1, o->transport = "default";
  if (argc < 2)
    return bc_usage(argv[0]), -1;
  int k = 0;
  while (k < BC_NUM_COLLS && strcmp(argv[1], bc_coll_names[k]) != 0)
    k++;
  if (k == BC_NUM_COLLS && strcmp(argv[1], "alltoall") == 0)
    k = BC_ALL_TO_ALL;
  if (k == BC_NUM_COLLS)
    return bc_usage(argv[0]), -1;
  o->coll = (bc_coll_t)k;
  for (int i = 2; i < argc; i += 2) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = !v || a[0] != '-' || a[1] == 0 || a[2] != 0;
    if (!bad) {
      switch (a[1]) {
      case 'b': bad = bc_parse_size(v, &o->minbytes); break;
      case 'e': bad = bc_parse_size(v, &o->maxbytes); break;
      case 'f': o->factor = (size_t)atol(v); bad = o->factor < 2; break;
      case 'n': o->iters = atoi(v); bad = o->iters < 1; break;
      case 'w': o->warmup = atoi(v); bad = o->warmup < 0; break;
      case 'c': o->check = atoi(v) != 0; break;
      case 't': o->transport = v; break;
      default: bad = 1;
      }
    }
    if (bad) {
      fprintf(stderr, "%s: bad option '%s %s'\n", argv[0], a, v ? v : "");
      return bc_usage(argv[0]), -1;
    }
  }
  return o->minbytes > o->maxbytes ? (bc_usage(argv[0]), -1) : 0;
}

/* ---- the sweep ---- */

static double bc_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int bc_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Page-aligned and touched, so the first timed call pays no page faults. */
static float *bc_alloc(size_t count) {
  size_t bytes = count ? count * sizeof(float) : 1;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("bench: mmap");
    exit(2);
  }
  memset(p, 0, bytes);
  return (float *)p;
}

static void bc_print_row(const bc_lib_t *lib, const bc_opts_t *o, const bc_counts_t *c,
                         const double *t_us, int64_t wrong) {
  double sec = t_us[0] * 1e-6;
  double algbw = sec > 0 ? (double)c->bytes / 1e9 / sec : 0;
  printf("{\"lib\":\"%s\",\"coll\":\"%s\",\"nranks\":%d,\"transport\":\"%s\",\"size\":%zu,"
         "\"count\":%zu,\"type\":\"float\",\"redop\":\"sum\",\"time_us\":%.3f,\"p50_us\":%.3f,"
         "\"p99_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":%lld}\n",
         lib->name, bc_coll_names[o->coll], lib->nranks, o->transport, c->bytes,
         c->recvcount > c->sendcount ? c->recvcount : c->sendcount, t_us[0], t_us[1], t_us[2],
         algbw, algbw * bc_busbw_factor(o->coll, lib->nranks), (long long)wrong);
  fflush(stdout);
}

/* Times one size: returns mean, p50, p99 (us) averaged over ranks in t_us[0..2]. The mean
 * comes from a loop with no clock read inside (as weft's perf tools time it: two reads per
 * call cost ~60 ns on the Zen 3 VM, a quarter of Open MPI's 8-byte broadcast there); p50 and
 * p99 from a second loop of at most BC_SAMPLE_ITERS calls, each timed on its own. */
#define BC_SAMPLE_ITERS 200
static void bc_time_size(const bc_lib_t *lib, const bc_opts_t *o, const bc_counts_t *c,
                         float *send, float *recv, double *samples, double *t_us) {
  lib->run(lib->ctx, o->coll, c, send, recv); /* untimed: connections, caches */
  lib->barrier(lib->ctx);
  double t0 = bc_now();
  for (int it = 0; it < o->iters; it++)
    lib->run(lib->ctx, o->coll, c, send, recv);
  double mean = (bc_now() - t0) / o->iters;
  int ns = o->iters < BC_SAMPLE_ITERS ? o->iters : BC_SAMPLE_ITERS;
  lib->barrier(lib->ctx);
  for (int it = 0; it < ns; it++) {
    double t = bc_now();
    lib->run(lib->ctx, o->coll, c, send, recv);
    samples[it] = bc_now() - t;
  }
  qsort(samples, (size_t)ns, sizeof(double), bc_cmp_double);
  t_us[0] = mean * 1e6;
  t_us[1] = samples[(ns - 1) / 2] * 1e6;
  t_us[2] = samples[(size_t)((ns - 1) * 0.99 + 0.5)] * 1e6;
  lib->sum(lib->ctx, t_us, 3);
  for (int k = 0; k < 3; k++)
    t_us[k] /= lib->nranks;
}

/* Fresh inputs, poisoned output, one call, wrong elements summed over ranks. */
static int64_t bc_check_size(const bc_lib_t *lib, const bc_opts_t *o, const bc_counts_t *c,
                             float *send, float *recv) {
  bc_fill_input(o->coll, lib->rank, c, send);
  memset(recv, 0xa5, c->recvcount * sizeof(float));
  const float *res = lib->run(lib->ctx, o->coll, c, send, recv);
  double wrong = (double)bc_count_wrong(o->coll, lib->rank, lib->nranks, c, res);
  lib->sum(lib->ctx, &wrong, 1);
  return (int64_t)wrong;
}

/* Runs the sweep; returns the number of sizes with wrong results. */
static int bc_sweep(const bc_lib_t *lib, const bc_opts_t *o) {
  bc_counts_t c, cmax;
  bc_counts(o->coll, o->maxbytes, lib->nranks, &cmax);
  float *send = bc_alloc(cmax.sendcount), *recv = bc_alloc(cmax.recvcount);
  double *samples = (double *)calloc((size_t)o->iters, sizeof(double));
  int bad = 0;
  const size_t warm[2] = {o->maxbytes, o->minbytes};
  for (int w = 0; w < 2; w++) {
    bc_counts(o->coll, warm[w], lib->nranks, &c);
    bc_fill_input(o->coll, lib->rank, &c, send);
    if (lib->prepare)
      lib->prepare(lib->ctx, o->coll, &c, send, recv);
    for (int it = 0; it < o->warmup && c.bytes > 0; it++)
      lib->run(lib->ctx, o->coll, &c, send, recv);
  }
  for (size_t size = o->minbytes ? o->minbytes : 1; size <= o->maxbytes; size *= o->factor) {
    bc_counts(o->coll, size, lib->nranks, &c);
    if (c.bytes == 0) /* fewer floats than ranks: nothing to move */
      continue;
    bc_fill_input(o->coll, lib->rank, &c, send);
    if (lib->prepare)
      lib->prepare(lib->ctx, o->coll, &c, send, recv);
    double t_us[3];
    bc_time_size(lib, o, &c, send, recv, samples, t_us);
    int64_t wrong = o->check ? bc_check_size(lib, o, &c, send, recv) : -1;
    bad += wrong > 0;
    if (lib->rank == 0)
      bc_print_row(lib, o, &c, t_us, wrong);
    lib->barrier(lib->ctx);
  }
  free(samples);
  munmap(send, cmax.sendcount ? cmax.sendcount * sizeof(float) : 1);
  munmap(recv, cmax.recvcount ? cmax.recvcount * sizeof(float) : 1);
  return bad;
}

#endif

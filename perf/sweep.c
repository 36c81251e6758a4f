/*
 * sweep.c: perf_main(), the collective-independent harness of weft's nccl-tests-compatible
 * benchmarks: communicator, buffers, the size sweep, timing and validation.
 *
 * It follows nccl-tests' src/common.cu step for step so that numbers and scripts carry
 * over: for each datatype, op and root, warm up (-w calls at every power-of-two size
 * from -b to -e), then for each size (-N times) run out-of-place and in-place: one untimed
 * call, `iters` timed iterations of -m calls each (enqueued on one stream and synchronized
 * once; with -z 1..3 blocking calls on the NULL stream, with the barriers -z asks for),
 * the per-rank time combined across ranks (-a), then -c check iterations on freshly
 * initialised data whose wrong elements are summed over ranks.
 *   size  = the larger of the send and receive buffers (nccl-tests: max(sendBytes,
 *           expectedBytes)); count = the count argument of the call,
 *   algbw = size / time,  busbw = algbw * coll->busbw_factor(nranks),  GB/s = 1e9 B/s.
 * -I 1 times every iteration: weft has no stream events, so each iteration waits for its
 * calls (time then is that of waited iterations); the times are maxed over ranks per
 * iteration, as nccl-tests' i_* columns. -L 1 (weft's) adds p50/p99 of single blocking
 * out-of-place calls: an extra pass of `iters` calls, each combined over ranks as -a says,
 * nearest-rank percentiles.
 *
 * Only the public weft API is used; ranks are processes (-t and -g must be 1), and only
 * rank 0 prints.
 */
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "perf/device.h"
#include "perf/perf_impl.h"

/* ------------------------------------------------------------------------------------
 * Errors, collective helpers
 * ------------------------------------------------------------------------------------ */

static void die(perf_ctx_t *c, const char *what, weft_status_t st) {
  fprintf(stderr, "%s: rank %d: %s failed: %s: %s\n", c->prog, c->rank, what,
          weft_get_error_string(st), weft_get_last_error(c->comm));
  if (c->comm)
    weft_comm_abort(c->comm); /* peers learn at once instead of at their deadline */
  exit(2);
}

/* A device step (perf/device.h) failed: its CUDA error. */
static void die_device(perf_ctx_t *c, const char *what) {
  fprintf(stderr, "%s: rank %d: %s failed: %s\n", c->prog, c->rank, what, perf_dev_error());
  if (c->comm)
    weft_comm_abort(c->comm);
  exit(2);
}

/* what: the step in words, for the message (never the source text of the call). */
#define PERF_CHECK(c, what, call)                                                        \
  do {                                                                                   \
    weft_status_t st_ = (call);                                                          \
    if (st_ != WEFT_SUCCESS)                                                             \
      die((c), (what), st_);                                                             \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void barrier(perf_ctx_t *c) {
  int32_t x = 0;
  PERF_CHECK(c, "the barrier between timed phases",
             weft_all_reduce(&x, &x, 1, WEFT_INT32, WEFT_SUM, c->comm, NULL));
}

/* Per-rank values t[0..n) combined over ranks element by element with op. */
static void reduce_times(perf_ctx_t *c, double *t, int n, weft_redop_t op) {
  PERF_CHECK(c, "combining the ranks' times",
             weft_all_reduce(t, t, (size_t)n, WEFT_FLOAT64, op, c->comm, NULL));
}

/* As -a asks: 0 rank 0's, 1 the average, 2 the minimum, 3 the maximum. */
static void combine_times(perf_ctx_t *c, double *t, int n) {
  if (c->o.average == 0) {
    PERF_CHECK(c, "sending rank 0's times",
               weft_broadcast(t, t, (size_t)n, WEFT_FLOAT64, 0, c->comm, NULL));
    return;
  }
  reduce_times(c, t, n, c->o.average == 2 ? WEFT_MIN : c->o.average == 3 ? WEFT_MAX : WEFT_SUM);
  for (int i = 0; c->o.average == 1 && i < n; i++)
    t[i] /= c->nranks;
}

static int64_t sum_over_ranks(perf_ctx_t *c, int64_t v, weft_redop_t op) {
  PERF_CHECK(c, "summing the ranks' counts",
             weft_all_reduce(&v, &v, 1, WEFT_INT64, op, c->comm, NULL));
  return v;
}

static const char *transport_name(void) {
  const char *t = getenv("WEFT_TRANSPORT");
  return t && *t ? t : "auto";
}

/* ------------------------------------------------------------------------------------
 * One benchmark: a size, out-of-place or in-place
 * ------------------------------------------------------------------------------------ */

static void buffers_of(perf_ctx_t *c, const perf_call_t *call, int in_place, char **send,
                       char **recv) {
  size_t es = weft_datatype_size(call->type), shift = (size_t)c->o.unalign * es;
  *send = c->sendbuf + shift;
  *recv = c->recvbuf + shift;
  if (in_place) {
    *send = c->recvbuf + shift + call->counts.send_inplace_offset * call->rank * es;
    *recv = c->recvbuf + shift + call->counts.recv_inplace_offset * call->rank * es;
  }
}

/* Issues one call (or agg calls in a group) on stream; blocking when stream is NULL. With
 * -z 1, a barrier follows, as nccl-tests' startColl. */
static void start_coll(perf_ctx_t *c, const perf_call_t *call, int in_place, int agg,
                       weft_stream_t stream) {
  char *send, *recv;
  buffers_of(c, call, in_place, &send, &recv);
  if (agg > 1)
    PERF_CHECK(c, "weft_group_start", weft_group_start());
  for (int a = 0; a < agg; a++)
    PERF_CHECK(c, c->coll->name, c->coll->run(call, send, recv, c->comm, stream));
  if (agg > 1)
    PERF_CHECK(c, "weft_group_end", weft_group_end());
  if (c->o.blocking == 1)
    barrier(c);
}

static void complete_coll(perf_ctx_t *c) {
  if (c->stream)
    PERF_CHECK(c, "weft_stream_synchronize", weft_stream_synchronize(c->stream));
  if (c->on_device && perf_dev_stream_sync() != 0) /* the results' copies back, in CUDA's order */
    die_device(c, "waiting for the CUDA stream");
}

/* Where the host reaches p, a place in the send or receive buffer: p itself, or with device
 * buffers its place in their host copy. */
static char *host_of(perf_ctx_t *c, char *p) {
  if (!c->on_device)
    return p;
  return p >= c->recvbuf && p < c->recvbuf + c->bufbytes ? c->hrecv + (p - c->recvbuf) : c->hsend + (p - c->sendbuf);
}

static void to_device(perf_ctx_t *c, char *p, size_t n) {
  if (c->on_device && n > 0 && perf_dev_copy(p, host_of(c, p), n) != 0)
    die_device(c, "copying the input to the device");
}

/* Fresh inputs; the receive region is poisoned first so unwritten elements show up. */
static void init_data(perf_ctx_t *c, const perf_call_t *call, int in_place) {
  char *send, *recv;
  buffers_of(c, call, in_place, &send, &recv);
  size_t es = weft_datatype_size(call->type);
  memset(host_of(c, recv), 0xa5, call->counts.recvcount * es);
  c->coll->fill_input(call, host_of(c, send));
  to_device(c, recv, call->counts.recvcount * es); /* in place the input lies inside: it goes too */
  to_device(c, send, call->counts.sendcount * es);
}

static int64_t count_wrong(perf_ctx_t *c, const perf_call_t *call, int in_place) {
  char *send, *recv;
  buffers_of(c, call, in_place, &send, &recv);
  size_t es = weft_datatype_size(call->type);
  size_t n = c->coll->expected(call, c->expected);
  if (c->on_device) {
    if (n > 0 && perf_dev_copy(host_of(c, recv), recv, n * es) != 0)
      die_device(c, "copying the result from the device");
    recv = host_of(c, recv);
  }
  if (memcmp(recv, c->expected, n * es) == 0)
    return 0;
  int64_t wrong = 0;
  for (size_t i = 0; i < n; i++)
    wrong += memcmp(recv + i * es, c->expected + i * es, es) != 0;
  return wrong;
}

/* -c check iterations, each on fresh data; stops at the first with wrong elements. */
static int64_t check(perf_ctx_t *c, const perf_call_t *call, int in_place) {
  int64_t wrong = 0;
  for (int i = 0; i < c->o.check && wrong == 0; i++) {
    init_data(c, call, in_place);
    start_coll(c, call, in_place, 1, c->stream);
    complete_coll(c);
    wrong = sum_over_ranks(c, count_wrong(c, call, in_place), WEFT_SUM);
  }
  return wrong;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* -L: o.iters single blocking out-of-place calls, each combined over ranks as -a says;
 * nearest-rank p50 and p99 in us. */
static void latency_pass(perf_ctx_t *c, const perf_call_t *call, double *p50, double *p99) {
  int n = c->o.iters;
  char *send, *recv;
  buffers_of(c, call, 0, &send, &recv);
  barrier(c);
  for (int it = 0; it < n; it++) { /* one call each, without -z 1's barrier */
    double t0 = now_s();
    PERF_CHECK(c, c->coll->name, c->coll->run(call, send, recv, c->comm, NULL));
    c->lat[it] = now_s() - t0;
  }
  combine_times(c, c->lat, n);
  qsort(c->lat, (size_t)n, sizeof(double), cmp_double);
  *p50 = c->lat[(int)ceil(0.50 * n) - 1] * 1e6;
  *p99 = c->lat[(int)ceil(0.99 * n) - 1] * 1e6;
}

/* -I: c->iter maxed over ranks per iteration, then nccl-tests' summary over the
 * iterations after the -K skipped ones. */
static void iter_stats(perf_ctx_t *c, perf_iter_stats_t *s) {
  int skip = c->o.per_iter_skip, n = c->o.iters - skip;
  reduce_times(c, c->iter, c->o.iters, WEFT_MAX);
  double *sorted = malloc((size_t)n * sizeof(double));
  if (sorted == NULL)
    die(c, "malloc of the per-iteration times", WEFT_ERR_NO_MEMORY);
  memcpy(sorted, c->iter + skip, (size_t)n * sizeof(double));
  qsort(sorted, (size_t)n, sizeof(double), cmp_double);
  double sum = 0, var = 0;
  for (int i = 0; i < n; i++) sum += sorted[i];
  *s = (perf_iter_stats_t){.min = sorted[0], .max = sorted[n - 1], .p50 = sorted[n / 2],
                           .avg = sum / n, .n = n, .skipped = skip, .times = c->iter};
  int i95 = (n * 95 + 99) / 100 - 1, i99 = (n * 99 + 99) / 100 - 1;
  s->p95 = sorted[i95 < n - 1 ? i95 : n - 1];
  s->p99 = sorted[i99 < n - 1 ? i99 : n - 1];
  for (int i = 0; i < n; i++) var += (sorted[i] - s->avg) * (sorted[i] - s->avg);
  s->stdev = sqrt(var / n);
  free(sorted);
}

/* The timed loop, as nccl-tests: enqueue every iteration, synchronize once; -z 3 waits
 * after each iteration and leaves the barrier after it out of the time. Returns seconds
 * per call (or CPU seconds with -C), combined over ranks. The clock is read around each
 * iteration only when -I or -z 3 needs it: two reads cost ~60 ns on the Zen 3 VM, a sixth of
 * an 8-byte broadcast's time per call there, which nccl-tests (events around the whole
 * loop) does not count either. */
static double timed_loop(perf_ctx_t *c, const perf_call_t *call, int in_place) {
  const perf_opts_t *o = &c->o;
  int each = o->per_iter || o->blocking == 3;
  double t0 = now_s(), coll_only = 0, ti = 0, te = 0;
  for (int it = 0; it < o->iters; it++) {
    if (each)
      ti = now_s();
    start_coll(c, call, in_place, o->agg, c->stream);
    if (o->per_iter)
      complete_coll(c); /* no stream events: an iteration's end is when it is waited for */
    if (each)
      te = now_s();
    if (o->per_iter)
      c->iter[it] = (te - ti) / o->agg;
    if (o->blocking == 3) {
      coll_only += te - ti;
      barrier(c);
    }
  }
  double calls = (double)o->iters * o->agg;
  double cpu = (o->blocking == 3 ? coll_only : now_s() - t0) / calls;
  complete_coll(c);
  double t = o->cputime ? cpu : (o->blocking == 3 ? coll_only : now_s() - t0) / calls;
  combine_times(c, &t, 1);
  return t;
}

static perf_result_t bench(perf_ctx_t *c, const perf_call_t *call, int in_place) {
  int checked = c->o.check > 0 && !(in_place && c->coll->inplace_unchecked);
  if (c->o.check)
    init_data(c, call, in_place);
  start_coll(c, call, in_place, 1, c->stream); /* untimed: connections, page faults */
  complete_coll(c);
  barrier(c);

  perf_result_t r = {.checked = checked};
  double sec = timed_loop(c, call, in_place);
  size_t es = weft_datatype_size(call->type);
  size_t bytes = es * (call->counts.sendcount > call->counts.recvcount ? call->counts.sendcount
                                                                       : call->counts.recvcount);
  r.usec = sec * 1e6;
  r.algbw = sec > 0 ? (double)bytes / 1e9 / sec : 0;
  r.busbw = r.algbw * c->coll->busbw_factor(c->nranks);
  barrier(c);
  perf_iter_stats_t s;
  if (c->o.per_iter)
    iter_stats(c, &s); /* collective: before the check, as rank 0 prints after it */
  r.wrong = check(c, call, in_place);
  if (c->rank == 0) {
    perf_print_result(c, &r, !in_place);
    if (c->o.per_iter)
      perf_print_iter_stats(c, &s, !in_place);
  }
  c->bw_sum += r.busbw;
  c->bw_count++;
  c->errors += checked && r.wrong != 0;
  return r;
}

/* ------------------------------------------------------------------------------------
 * The sweep over sizes, for one datatype, op and root
 * ------------------------------------------------------------------------------------ */

static void setup_call(perf_ctx_t *c, perf_call_t *call, size_t bytes) {
  size_t count = bytes / weft_datatype_size(call->type);
  c->coll->get_counts(count, c->nranks, &call->counts);
}

static size_t next_size(const perf_opts_t *o, size_t size) {
  if (o->stepfactor > 1)
    return size ? size * o->stepfactor : 1;
  return size + (o->stepbytes ? o->stepbytes : 1);
}

static void bench_row(perf_ctx_t *c, const perf_call_t *call) {
  size_t es = weft_datatype_size(call->type);
  size_t n = call->counts.sendcount > call->counts.recvcount ? call->counts.sendcount
                                                             : call->counts.recvcount;
  if (c->rank == 0)
    perf_print_row_start(c, n * es, call->counts.paramcount, perf_type_names[call->type],
                         c->coll->has_op ? perf_op_names[call->op] : "none",
                         c->coll->has_root ? call->root : -1);
  bench(c, call, 0);
  bench(c, call, 1);
  double p50 = 0, p99 = 0;
  if (c->o.latency)
    latency_pass(c, call, &p50, &p99);
  if (c->rank == 0) {
    /* The algorithm weft ran for this row (weft_get_algorithm), for -J. */
    const char *algo = NULL;
    if (weft_get_algorithm(c->comm, c->coll->name, call->counts.paramcount, call->type, &algo) != WEFT_SUCCESS)
      algo = "unknown";
    perf_print_row_end(c, p50, p99, algo);
  }
}

static void time_test(perf_ctx_t *c, weft_datatype_t type, int op, int root) {
  perf_call_t call = {.type = type, .op = (weft_redop_t)op, .root = root,
                      .rank = c->rank, .nranks = c->nranks};
  barrier(c);
  for (size_t size = c->o.minbytes; size <= c->o.maxbytes; size = size ? size * 2 : 1) {
    setup_call(c, &call, size); /* warm up at every power-of-two size, as nccl-tests */
    for (int it = 0; it < c->o.warmup; it++)
      start_coll(c, &call, 0, 1, c->stream);
    complete_coll(c);
  }
  long cycles = c->o.run_cycles; /* 0: until stopped */
  do {
    for (size_t size = c->o.minbytes; size <= c->o.maxbytes; size = next_size(&c->o, size)) {
      setup_call(c, &call, size);
      bench_row(c, &call);
    }
  } while (--cycles != 0);
}

static void run_tests(perf_ctx_t *c) {
  const perf_opts_t *o = &c->o;
  for (int t = 0; t < WEFT_NUM_DATATYPES; t++) {
    if (o->type >= 0 && t != o->type)
      continue;
    for (int op = 0; op < (c->coll->has_op ? WEFT_NUM_OPS : 1); op++) {
      if (c->coll->has_op && o->op >= 0 && op != o->op)
        continue;
      if (!c->coll->has_root)
        time_test(c, (weft_datatype_t)t, op, -1);
      for (int r = 0; c->coll->has_root && r < c->nranks; r++)
        if (o->root < 0 || r == o->root)
          time_test(c, (weft_datatype_t)t, op, r);
    }
  }
}

/* ------------------------------------------------------------------------------------
 * "# Using devices": one line per rank, in rank order
 * ------------------------------------------------------------------------------------ */

typedef struct {
  int32_t rank, pid, device;
  char host[64];
  char info[192];
} perf_rank_info_t;

/* In weft_comm_init_from_env's order: the most specific launcher first. */
static int local_rank_from_env(void) {
  static const char *vars[] = {"WEFT_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                               "MPI_LOCALRANKID", "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
    if (getenv(vars[i]))
      return atoi(getenv(vars[i]));
  return 0;
}

/* "CPUs 0-3" from the kernel's view of this process's affinity. */
static void cpu_list(char *out, size_t len) {
  snprintf(out, len, "?");
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  while (f != NULL && fgets(line, sizeof(line), f) != NULL)
    if (sscanf(line, "Cpus_allowed_list: %63s", out) == 1)
      break;
  if (f != NULL)
    fclose(f);
}

static void print_devices(perf_ctx_t *c) {
  perf_rank_info_t me = {.rank = c->rank, .pid = (int32_t)getpid(), .device = local_rank_from_env()};
  char cpus[64];
  gethostname(me.host, sizeof(me.host) - 1);
  cpu_list(cpus, sizeof(cpus));
  snprintf(me.info, sizeof(me.info), "weft %s, CPUs %s", transport_name(), cpus);
  if (c->on_device) { /* as nccl-tests: the GPU's PCI bus id and name */
    me.device = c->device;
    snprintf(me.info, sizeof(me.info), "%s (weft %s, CPUs %s)", c->device_desc, transport_name(), cpus);
  }
  perf_rank_info_t *all = calloc((size_t)c->nranks, sizeof(*all));
  if (!all)
    die(c, "calloc of the rank list", WEFT_ERR_NO_MEMORY);
  PERF_CHECK(c, "gathering the ranks' hosts",
             weft_all_gather(&me, all, sizeof(me), WEFT_UINT8, c->comm, NULL));
  c->nhosts = 0;
  for (int r = 0; r < c->nranks; r++) { /* a host counts at its first rank */
    int seen = 0;
    for (int q = 0; q < r && !seen; q++)
      seen = strncmp(all[q].host, all[r].host, sizeof(all[r].host)) == 0;
    c->nhosts += !seen;
  }
  perf_json_config(c->json, c);
  for (int r = 0; c->rank == 0 && r < c->nranks; r++) {
    char line[256];
    int gpu = all[r].info[0] == '['; /* a GPU's "[bus id] name"; else host buffers */
    snprintf(line, sizeof(line), "#  Rank %2d Group %2d Pid %6d on %10s device %2d %s%s\n",
             all[r].rank, 0, (int)all[r].pid, all[r].host, (int)all[r].device, gpu ? "" : "[cpu] ", all[r].info);
    perf_print_device(line);
    perf_json_device(c->json, all[r].rank, all[r].pid, all[r].host, all[r].device, all[r].info);
  }
  free(all);
}

/* ------------------------------------------------------------------------------------
 * Setup and main
 * ------------------------------------------------------------------------------------ */

/* Resident memory of this process in bytes (-M). */
static long resident_bytes(void) {
  long pages = 0, rss = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f != NULL) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    fclose(f);
  }
  return rss * sysconf(_SC_PAGESIZE);
}

/* Page-aligned and touched, so the first timed call does not pay the page faults. -R 1:
 * the program's own (private) memory registered with weft_comm_register, which adopts it
 * (as nccl-tests' -R 1 calls ncclCommRegister on its buffers; the registrations go with
 * the communicator); -R 2: from weft_mem_alloc (memory peers can map) registered as a
 * window (nccl-tests' -R 2: ncclMemAlloc and ncclCommWindowRegister). */
static char *alloc_buffer(perf_ctx_t *c, size_t bytes, int reg) {
  if (bytes == 0)
    bytes = 1;
  void *p;
  weft_window_t w;
  if (c->on_device) { /* the rank's GPU (-B): cudaMalloc'd, or weft_mem_alloc_device's for -R 2 */
    if (perf_dev_alloc(&p, bytes, reg == 2) != 0)
      die_device(c, "allocating a benchmark buffer on the device");
    if (reg == 2)
      PERF_CHECK(c, "registering a benchmark buffer as a window (-R 2)", weft_comm_window_register(c->comm, p, bytes, &w, 0));
    return p;
  }
  if (reg == 2) {
    PERF_CHECK(c, "weft_mem_alloc of a benchmark buffer (-R 2)", weft_mem_alloc(&p, bytes));
  } else {
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      die(c, "mmap of the benchmark buffers", WEFT_ERR_NO_MEMORY);
  }
  memset(p, 0, bytes);
  weft_reg_t r;
  if (reg == 1)
    PERF_CHECK(c, "registering the benchmark's own buffer (-R 1)", weft_comm_register(c->comm, p, bytes, &r));
  if (reg == 2)
    PERF_CHECK(c, "registering a benchmark buffer as a window (-R 2)", weft_comm_window_register(c->comm, p, bytes, &w, 0));
  return p;
}

/* -B: the buffers on the rank's GPU (auto: where weft has CUDA and a GPU is there). With
 * -R 1 they stay on the host: weft_comm_register adopts host memory only. */
static void choose_buffers(perf_ctx_t *c) {
  c->on_device = 0;
  if (c->o.buffers == 0)
    return;
  if (c->o.local_register == 1) {
    if (c->o.buffers == 1) {
      fprintf(stderr, "%s: rank %d: -B device with -R 1: weft_comm_register takes host memory; use -R 2 "
              "(device windows) or -B host\n", c->prog, c->rank);
      weft_comm_abort(c->comm);
      exit(2);
    }
    return;
  }
  if (perf_dev_open(local_rank_from_env(), &c->device, c->device_desc, sizeof(c->device_desc)) != 0) {
    if (c->o.buffers == 1)
      die_device(c, "-B device: opening the rank's GPU");
    return; /* auto: host */
  }
  c->on_device = 1;
}

static void setup(perf_ctx_t *c) {
  weft_config_t cfg = WEFT_CONFIG_INITIALIZER;
  if (c->o.timeout_s > 0)
    cfg.timeout_ms = c->o.timeout_s * 1000;
  long rss0 = resident_bytes();
  /* without a launcher: one rank (weft says so), as nccl-tests without MPI */
  PERF_CHECK(c, "joining the job (init from the launcher's environment)",
             weft_comm_init_from_env(&c->comm, &cfg));
  PERF_CHECK(c, "weft_comm_user_rank", weft_comm_user_rank(c->comm, &c->rank));
  PERF_CHECK(c, "weft_comm_count", weft_comm_count(c->comm, &c->nranks));
  choose_buffers(c);
  if (!c->o.blocking && !c->o.stream_null) {
    if (c->on_device && perf_dev_stream_create(&c->stream) != 0)
      die_device(c, "a CUDA stream for the calls");
    if (!c->on_device)
      PERF_CHECK(c, "weft_stream_create", weft_stream_create(&c->stream));
  }
  long rss1 = resident_bytes();
  /* counts of one-byte elements are byte counts; every type needs at most these */
  perf_counts_t max;
  c->coll->get_counts(c->o.maxbytes, c->nranks, &max);
  c->recvbytes = max.recvcount;
  c->bufbytes = (max.sendcount > max.recvcount ? max.sendcount : max.recvcount) + 8u * (size_t)c->o.unalign;
  /* both as large as the larger side, as nccl-tests: in-place runs send from recvbuf */
  c->sendbuf = alloc_buffer(c, c->bufbytes, c->o.local_register);
  c->recvbuf = alloc_buffer(c, c->bufbytes, c->o.local_register);
  int dev = c->on_device;
  c->on_device = 0; /* the expected result and the host copies are host memory */
  c->expected = alloc_buffer(c, c->recvbytes, 0);
  if (dev) {
    c->hsend = alloc_buffer(c, c->bufbytes, 0);
    c->hrecv = alloc_buffer(c, c->bufbytes, 0);
  }
  c->on_device = dev;
  c->lat = calloc((size_t)c->o.iters, sizeof(double));
  c->iter = calloc((size_t)c->o.iters, sizeof(double));
  if (!c->lat || !c->iter)
    die(c, "calloc of the timing samples", WEFT_ERR_NO_MEMORY);
  c->mem_init = rss1 - rss0;
  c->mem_buffers = resident_bytes() - rss1;
}

/* Checks that need the communicator; every rank reaches the same verdict, so all of them
 * stop together. Returns -1 to go on, else the exit status. */
static int check_setup(perf_ctx_t *c) {
  if (c->coll->has_root && c->o.root >= c->nranks) {
    if (c->rank == 0)
      fprintf(stderr, "%s: -r %d: root outside [0, %d)\n", c->prog, c->o.root, c->nranks);
    return 2;
  }
  return -1;
}

static void teardown(perf_ctx_t *c) {
  if (c->stream && c->on_device)
    perf_dev_stream_destroy(c->stream);
  else if (c->stream)
    PERF_CHECK(c, "weft_stream_destroy", weft_stream_destroy(c->stream));
  PERF_CHECK(c, "weft_comm_destroy", weft_comm_destroy(c->comm));
  c->comm = NULL;
  if (c->on_device) {
    if (c->o.local_register == 2) {
      PERF_CHECK(c, "weft_mem_free", weft_mem_free(c->sendbuf));
      PERF_CHECK(c, "weft_mem_free", weft_mem_free(c->recvbuf));
    } else {
      perf_dev_free(c->sendbuf);
      perf_dev_free(c->recvbuf);
    }
    munmap(c->hsend, c->bufbytes ? c->bufbytes : 1);
    munmap(c->hrecv, c->bufbytes ? c->bufbytes : 1);
  } else if (c->o.local_register == 2) { /* the windows went with the communicator */
    PERF_CHECK(c, "weft_mem_free", weft_mem_free(c->sendbuf));
    PERF_CHECK(c, "weft_mem_free", weft_mem_free(c->recvbuf));
  } else {
    munmap(c->sendbuf, c->bufbytes ? c->bufbytes : 1);
    munmap(c->recvbuf, c->bufbytes ? c->bufbytes : 1);
  }
  munmap(c->expected, c->recvbytes ? c->recvbytes : 1);
  free(c->lat);
  free(c->iter);
}

/* The figures every rank agrees on after the sweep: errors, memory (the largest rank's). */
static void gather_totals(perf_ctx_t *c, long rss_before) {
  c->errors = (int)sum_over_ranks(c, c->errors, WEFT_MAX); /* every rank counted every result */
  c->mem_coll = resident_bytes() - rss_before;
  c->mem_init = sum_over_ranks(c, c->mem_init, WEFT_MAX);
  c->mem_buffers = sum_over_ranks(c, c->mem_buffers, WEFT_MAX);
  c->mem_coll = sum_over_ranks(c, c->mem_coll, WEFT_MAX);
}

int perf_main(int argc, char **argv, const perf_coll_t *coll) {
  perf_ctx_t c = {.coll = coll, .prog = basename(argv[0]), .argc = argc, .argv = argv};
  perf_default_opts(&c.o);
  c.rank = perf_env_rank() > 0 ? perf_env_rank() : 0; /* for messages until weft knows */
  setlinebuf(stdout);
  int rc = perf_parse_args(argc, argv, &c);
  if (rc >= 0)
    return rc;
  if (c.o.json_path && perf_env_rank() <= 0)
    c.json = perf_json_open(c.o.json_path, argc, argv);
  setup(&c);
  rc = check_setup(&c);
  if (rc >= 0) {
    teardown(&c);
    return rc;
  }
  if (c.rank == 0)
    perf_print_header(&c);
  print_devices(&c);
  if (c.rank == 0) {
    perf_json_results_start(c.json);
    perf_print_columns(&c);
  }
  long rss = resident_bytes();
  run_tests(&c);
  gather_totals(&c, rss);
  teardown(&c);

  const char *min_env = getenv("NCCL_TESTS_MIN_BW");
  double min_bw = min_env ? atof(min_env) : -1, avg = c.bw_count ? c.bw_sum / c.bw_count : 0.0;
  if (c.rank == 0) {
    perf_print_footer(&c, avg, min_bw);
    perf_json_close(c.json, c.errors, avg, min_bw, NULL);
  }
  return c.errors || (min_bw >= 0 && avg < min_bw * 0.9) ? 1 : 0;
}

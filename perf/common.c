/*
 * common.c: the collective-independent part of weft's nccl-tests-compatible
 * benchmarks: flags, communicator setup, buffers, the size sweep, timing, validation
 * and the nccl-tests output format (header, "# Using devices", result rows, footer).
 *
 * It follows nccl-tests' src/common.cu step for step so that numbers and scripts
 * carry over: for each datatype, op and root, warm up at the largest and smallest size,
 * then for each size run out-of-place and in-place: one untimed call, `iters` timed
 * calls (enqueued on one stream and synchronized once, or blocking with -z 1), the
 * per-rank time combined across ranks (-a), then a separate validation call on freshly
 * initialised data whose wrong elements are summed over ranks.
 *   size  = the larger of the send and receive buffers (nccl-tests: max(sendBytes,
 *           expectedBytes)); count = the count argument of the call,
 *   algbw = size / time,  busbw = algbw * coll->busbw_factor(nranks),  GB/s = 1e9 B/s.
 *
 * Two additions, after the nccl-tests columns so that its parsers keep working:
 *  - p50 / p99 (us): latency percentiles of single out-of-place calls. The timed loop
 *    above enqueues all iterations and synchronizes once, so it has no per-call times;
 *    an extra pass of `iters` blocking (NULL-stream) calls is timed call by call
 *    instead, each call's time is combined over ranks as -a says, and the nearest-rank
 *    percentiles are taken. With -z 1 the timed loop is already blocking and its own
 *    per-iteration times are used (a group of -m calls counts as one, divided by -m).
 *  - -J FILE: rank 0 appends one JSON object per result row: every figure of the row
 *    and the run's configuration (library version, ranks, distinct hosts, transport,
 *    algorithm, flags).
 *
 * Only the public weft API is used; ranks are processes (one rank per process, so
 * -t and -g must be 1), and only rank 0 prints.
 */
#include "perf/common.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  size_t minbytes, maxbytes, stepbytes, stepfactor;
  int iters, warmup, agg, check, blocking, average, cputime, timeout_s;
  int local_register; /* -R: 0 plain buffers; 1, 2: weft_mem_alloc + registered windows */
  int type; /* -1: all */
  int op;   /* -1: all */
  int root; /* -1: all, for rooted collectives */
  const char *json_path; /* -J: NULL for none */
} perf_opts_t;

/* One half of a result row (out-of-place or in-place). */
typedef struct {
  double usec, algbw, busbw;
  int64_t wrong;
  int checked; /* 0: wrong is "N/A" */
} perf_result_t;

typedef struct {
  const perf_coll_t *coll;
  const char *prog;
  perf_opts_t o;
  weft_comm_t comm;
  weft_stream_t stream; /* NULL in blocking mode */
  int rank, nranks;
  char *sendbuf, *recvbuf, *expected;
  size_t recvbytes, bufbytes; /* bufbytes: the send and receive buffers */
  double bw_sum;
  int bw_count;
  int errors; /* results with at least one wrong element */
  int nhosts; /* distinct hostnames among the ranks */
  FILE *json; /* -J, rank 0 only */
  double *lat; /* o.iters per-call latencies (s) of the current out-of-place run */
} perf_ctx_t;

static const char *const type_names[WEFT_NUM_DATATYPES] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"};
static const char *const op_names[WEFT_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};

/* ------------------------------------------------------------------------------------
 * fp16 / bf16 conversions (round to nearest-even), local because the library's are
 * internal.
 * ------------------------------------------------------------------------------------ */

static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  uint32_t sign = (x >> 16) & 0x8000, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) /* inf, NaN (kept quiet) */
    return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0));
  if (a >= 0x477ff000u) /* >= 65520 rounds to inf */
    return (uint16_t)(sign | 0x7c00);
  if (a < 0x38800000u) { /* below 2^-14: a subnormal half, in units of 2^-24 */
    float af;
    memcpy(&af, &a, sizeof(af));
    return (uint16_t)(sign | (uint32_t)lrintf(af * 16777216.0f));
  }
  uint32_t h = (((a >> 23) - 112) << 10) | ((a >> 13) & 0x3ff), rem = a & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
    h++; /* a carry into the exponent is still the right encoding */
  return (uint16_t)(sign | h);
}

static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float v = e == 0 ? ldexpf((float)m, -24)
                   : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), e - 25);
  return (h & 0x8000) ? -v : v;
}

static uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static float bf16_to_float(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, sizeof(f));
  return f;
}

/* ------------------------------------------------------------------------------------
 * Element values
 * ------------------------------------------------------------------------------------ */

void perf_store(void *buf, size_t i, weft_datatype_t type, double v) {
  switch (type) {
  case WEFT_INT8: ((int8_t *)buf)[i] = (int8_t)(int64_t)v; break;
  case WEFT_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
  case WEFT_INT32: ((int32_t *)buf)[i] = (int32_t)(int64_t)v; break;
  case WEFT_UINT32: ((uint32_t *)buf)[i] = (uint32_t)(int64_t)v; break;
  case WEFT_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case WEFT_UINT64: ((uint64_t *)buf)[i] = (uint64_t)(int64_t)v; break;
  case WEFT_FLOAT16: ((uint16_t *)buf)[i] = float_to_half((float)v); break;
  case WEFT_FLOAT32: ((float *)buf)[i] = (float)v; break;
  case WEFT_FLOAT64: ((double *)buf)[i] = v; break;
  case WEFT_BFLOAT16: ((uint16_t *)buf)[i] = float_to_bf16((float)v); break;
  default: break;
  }
}

double perf_load(const void *buf, size_t i, weft_datatype_t type) {
  switch (type) {
  case WEFT_INT8: return ((const int8_t *)buf)[i];
  case WEFT_UINT8: return ((const uint8_t *)buf)[i];
  case WEFT_INT32: return ((const int32_t *)buf)[i];
  case WEFT_UINT32: return ((const uint32_t *)buf)[i];
  case WEFT_INT64: return (double)((const int64_t *)buf)[i];
  case WEFT_UINT64: return (double)((const uint64_t *)buf)[i];
  case WEFT_FLOAT16: return half_to_float(((const uint16_t *)buf)[i]);
  case WEFT_FLOAT32: return ((const float *)buf)[i];
  case WEFT_FLOAT64: return ((const double *)buf)[i];
  case WEFT_BFLOAT16: return bf16_to_float(((const uint16_t *)buf)[i]);
  default: return 0;
  }
}

static int type_is_unsigned(weft_datatype_t t) {
  return t == WEFT_UINT8 || t == WEFT_UINT32 || t == WEFT_UINT64;
}

static int type_is_integer(weft_datatype_t t) { return t <= WEFT_UINT64; }

double perf_input_value(weft_datatype_t type, weft_redop_t op, int rank, size_t i) {
  size_t r = (size_t)rank;
  switch (op) {
  case WEFT_PROD: /* rank r doubles element i iff 11 | i + r: <= 3 twos over 32 ranks */
    return (i + r) % 11 == 0 ? 2 : 1;
  case WEFT_MAX:
  case WEFT_MIN: {
    double v = (double)((r * 5 + i * 3) % 13);
    return type_is_unsigned(type) ? v : v - 6;
  }
  default: /* sum, avg: 0..3, so 32 ranks sum to <= 96: exact in int8 and bf16 */
    return (double)((r * 3 + i * 7) % 4);
  }
}

/* v wrapped modulo 2^bits into type's range, as weft's integer sum and prod wrap. */
static double wrap_integer(weft_datatype_t type, double v) {
  char tmp[8];
  perf_store(tmp, 0, type, v);
  return perf_load(tmp, 0, type);
}

double perf_reduce_value(weft_datatype_t type, weft_redop_t op, int nranks, size_t i) {
  double acc = perf_input_value(type, op, 0, i);
  for (int r = 1; r < nranks; r++) {
    double v = perf_input_value(type, op, r, i);
    switch (op) {
    case WEFT_PROD: acc *= v; break;
    case WEFT_MAX: acc = v > acc ? v : acc; break;
    case WEFT_MIN: acc = v < acc ? v : acc; break;
    default: acc += v; break;
    }
  }
  if (type_is_integer(type))
    acc = wrap_integer(type, acc);
  if (op != WEFT_AVG)
    return acc;
  /* avg divides once at the end in the type's arithmetic: integers truncate, float
   * and fp16/bf16 divide in fp32 (the final store rounds fp16/bf16), double in fp64 */
  if (type_is_integer(type))
    return trunc(acc / nranks);
  if (type == WEFT_FLOAT64)
    return acc / nranks;
  return (double)((float)acc / (float)nranks);
}

/* Every pattern of perf_input_value repeats in i with period 4, 11 or 13, and
 * perf_move_value's with period 113. */
#define VALUE_PERIOD (4 * 11 * 13)
#define MOVE_PERIOD 113

/* Copies buf's first `period` elements over the rest, doubling each time. */
static void tile_period(void *buf, size_t n, weft_datatype_t type, size_t period) {
  size_t es = weft_datatype_size(type), done = n < period ? n : period;
  while (done < n) {
    size_t len = done < n - done ? done : n - done;
    memcpy((char *)buf + done * es, buf, len * es);
    done += len;
  }
}

void perf_fill_input(void *buf, size_t n, weft_datatype_t type, weft_redop_t op, int rank,
                     size_t first) {
  for (size_t i = 0; i < n && i < VALUE_PERIOD; i++)
    perf_store(buf, i, type, perf_input_value(type, op, rank, first + i));
  tile_period(buf, n, type, VALUE_PERIOD);
}

void perf_fill_reduced(void *buf, size_t n, weft_datatype_t type, weft_redop_t op, int nranks,
                       size_t first) {
  for (size_t i = 0; i < n && i < VALUE_PERIOD; i++)
    perf_store(buf, i, type, perf_reduce_value(type, op, nranks, first + i));
  tile_period(buf, n, type, VALUE_PERIOD);
}

double perf_move_value(weft_datatype_t type, int rank, size_t i) {
  double v = (double)(((size_t)rank * 31 + i * 7) % MOVE_PERIOD); /* <= 112: exact in bf16 */
  return type_is_unsigned(type) ? v : v - 56;
}

void perf_fill_moved(void *buf, size_t n, weft_datatype_t type, int rank, size_t first) {
  for (size_t i = 0; i < n && i < MOVE_PERIOD; i++)
    perf_store(buf, i, type, perf_move_value(type, rank, first + i));
  tile_period(buf, n, type, MOVE_PERIOD);
}

void *perf_elem(void *buf, size_t i, weft_datatype_t type) {
  return (char *)buf + i * weft_datatype_size(type);
}

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

#define PERF_CHECK(c, call)                                                              \
  do {                                                                                   \
    weft_status_t st_ = (call);                                                          \
    if (st_ != WEFT_SUCCESS)                                                             \
      die((c), #call, st_);                                                              \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void barrier(perf_ctx_t *c) {
  int32_t x = 0;
  PERF_CHECK(c, weft_all_reduce(&x, &x, 1, WEFT_INT32, WEFT_SUM, c->comm, NULL));
}

/* Per-rank times t[0..n) combined over ranks, element by element, as -a asks:
 * 0 rank 0's, 1 the average, 2 the minimum, 3 the maximum. */
static void combine_times(perf_ctx_t *c, double *t, int n) {
  if (c->o.average == 0) {
    PERF_CHECK(c, weft_broadcast(t, t, (size_t)n, WEFT_FLOAT64, 0, c->comm, NULL));
    return;
  }
  weft_redop_t op = c->o.average == 2 ? WEFT_MIN : c->o.average == 3 ? WEFT_MAX : WEFT_SUM;
  PERF_CHECK(c, weft_all_reduce(t, t, (size_t)n, WEFT_FLOAT64, op, c->comm, NULL));
  for (int i = 0; c->o.average == 1 && i < n; i++)
    t[i] /= c->nranks;
}

static int64_t sum_over_ranks(perf_ctx_t *c, int64_t v) {
  PERF_CHECK(c, weft_all_reduce(&v, &v, 1, WEFT_INT64, WEFT_SUM, c->comm, NULL));
  return v;
}

static const char *transport_name(void) {
  const char *t = getenv("WEFT_TRANSPORT");
  return t && *t ? t : "auto";
}

/* What the user asked for: WEFT_ALGO, or "default" for the tuner's own choice. Each row
 * records the algorithm actually run (weft_get_algorithm). */
static const char *algorithm_name(void) {
  const char *a = getenv("WEFT_ALGO");
  return a && *a ? a : "default";
}

/* ------------------------------------------------------------------------------------
 * One benchmark: a size, out-of-place or in-place
 * ------------------------------------------------------------------------------------ */

static void buffers_of(perf_ctx_t *c, const perf_call_t *call, int in_place, char **send,
                       char **recv) {
  size_t es = weft_datatype_size(call->type);
  *send = c->sendbuf;
  *recv = c->recvbuf;
  if (in_place) {
    *send = c->recvbuf + call->counts.send_inplace_offset * call->rank * es;
    *recv = c->recvbuf + call->counts.recv_inplace_offset * call->rank * es;
  }
}

/* Issues one call (or agg calls in a group) on stream; blocking when stream is NULL. */
static void start_coll(perf_ctx_t *c, const perf_call_t *call, int in_place, int agg,
                       weft_stream_t stream) {
  char *send, *recv;
  buffers_of(c, call, in_place, &send, &recv);
  if (agg > 1)
    PERF_CHECK(c, weft_group_start());
  for (int a = 0; a < agg; a++)
    PERF_CHECK(c, c->coll->run(call, send, recv, c->comm, stream));
  if (agg > 1)
    PERF_CHECK(c, weft_group_end());
}

static void complete_coll(perf_ctx_t *c) {
  if (c->stream)
    PERF_CHECK(c, weft_stream_synchronize(c->stream));
}

/* Fresh inputs; the receive region is poisoned first so unwritten elements show up. */
static void init_data(perf_ctx_t *c, const perf_call_t *call, int in_place) {
  char *send, *recv;
  buffers_of(c, call, in_place, &send, &recv);
  memset(recv, 0xa5, call->counts.recvcount * weft_datatype_size(call->type));
  c->coll->fill_input(call, send);
}

static int64_t count_wrong(perf_ctx_t *c, const perf_call_t *call, int in_place) {
  char *send, *recv;
  buffers_of(c, call, in_place, &send, &recv);
  size_t es = weft_datatype_size(call->type);
  size_t n = c->coll->expected(call, c->expected);
  if (memcmp(recv, c->expected, n * es) == 0)
    return 0;
  int64_t wrong = 0;
  for (size_t i = 0; i < n; i++)
    wrong += memcmp(recv + i * es, c->expected + i * es, es) != 0;
  return wrong;
}

static void print_result(perf_ctx_t *c, const perf_result_t *r) {
  if (c->rank != 0)
    return;
  const char *fmt = r->usec >= 10000.0 ? "%7.0f" : r->usec >= 100.0 ? "%7.1f" : "%7.2f";
  char t[32];
  snprintf(t, sizeof(t), fmt, r->usec);
  if (r->checked)
    printf("  %7s  %6.2f  %6.2f  %5lld", t, r->algbw, r->busbw, (long long)r->wrong);
  else
    printf("  %7s  %6.2f  %6.2f  %5s", t, r->algbw, r->busbw, "N/A");
}

/* Times o.iters single blocking out-of-place calls into c->lat (seconds). */
static void latency_pass(perf_ctx_t *c, const perf_call_t *call) {
  barrier(c);
  for (int it = 0; it < c->o.iters; it++) {
    double t0 = now_s();
    start_coll(c, call, 0, 1, NULL);
    c->lat[it] = now_s() - t0;
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentiles of c->lat, in us, after combining each call over ranks. */
static void latency_percentiles(perf_ctx_t *c, double *p50, double *p99) {
  int n = c->o.iters;
  combine_times(c, c->lat, n);
  qsort(c->lat, (size_t)n, sizeof(double), cmp_double);
  *p50 = c->lat[(int)ceil(0.50 * n) - 1] * 1e6;
  *p99 = c->lat[(int)ceil(0.99 * n) - 1] * 1e6;
}

/* The timed loop, as nccl-tests: enqueue every iteration, synchronize once. Blocking
 * (-z 1) calls complete one by one, so their times also go to c->lat when asked. */
static double timed_loop(perf_ctx_t *c, const perf_call_t *call, int in_place, int record) {
  const perf_opts_t *o = &c->o;
  double t0 = now_s(), prev = t0;
  for (int it = 0; it < o->iters; it++) {
    start_coll(c, call, in_place, o->agg, c->stream);
    if (record && !c->stream) {
      double t = now_s();
      c->lat[it] = (t - prev) / o->agg;
      prev = t;
    }
  }
  double cpu = (now_s() - t0) / ((double)o->iters * o->agg);
  complete_coll(c);
  double sec = (now_s() - t0) / ((double)o->iters * o->agg);
  double t = o->cputime ? cpu : sec;
  combine_times(c, &t, 1);
  return t;
}

static perf_result_t bench(perf_ctx_t *c, const perf_call_t *call, int in_place) {
  const perf_opts_t *o = &c->o;
  int check = o->check && !(in_place && c->coll->inplace_unchecked);
  if (o->check)
    init_data(c, call, in_place);
  start_coll(c, call, in_place, 1, c->stream); /* untimed: connections, page faults */
  complete_coll(c);
  barrier(c);

  perf_result_t r = {.checked = check};
  double sec = timed_loop(c, call, in_place, !in_place);
  size_t es = weft_datatype_size(call->type);
  size_t bytes = es * (call->counts.sendcount > call->counts.recvcount ? call->counts.sendcount
                                                                       : call->counts.recvcount);
  r.usec = sec * 1e6;
  r.algbw = sec > 0 ? (double)bytes / 1e9 / sec : 0;
  r.busbw = r.algbw * c->coll->busbw_factor(c->nranks);
  barrier(c);

  if (!in_place && c->stream)
    latency_pass(c, call);
  if (o->check) {
    init_data(c, call, in_place);
    start_coll(c, call, in_place, 1, c->stream);
    complete_coll(c);
    r.wrong = sum_over_ranks(c, count_wrong(c, call, in_place));
  }
  print_result(c, &r);
  c->bw_sum += r.busbw;
  c->bw_count++;
  c->errors += check && r.wrong != 0;
  return r;
}

/* ------------------------------------------------------------------------------------
 * JSON rows (-J)
 * ------------------------------------------------------------------------------------ */

/* s as a JSON string: quotes, backslashes and control characters escaped. */
static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", f);
    else if (*p == '\t')
      fputs("\\t", f);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

static void json_field(FILE *f, const char *key, const char *value) {
  json_string(f, key);
  fputc(':', f);
  json_string(f, value);
}

static void json_result(FILE *f, const char *key, const perf_result_t *r) {
  json_string(f, key);
  fprintf(f, ":{\"time_us\":%.3f,\"algbw_gbps\":%.6g,\"busbw_gbps\":%.6g,\"wrong\":", r->usec,
          r->algbw, r->busbw);
  if (r->checked)
    fprintf(f, "%lld}", (long long)r->wrong);
  else
    fputs("null}", f);
}

static void json_config(perf_ctx_t *c) {
  FILE *f = c->json;
  const perf_opts_t *o = &c->o;
  int v = 0;
  weft_get_version(&v);
  char version[32];
  snprintf(version, sizeof(version), "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  fputs("\"config\":{", f);
  json_field(f, "library", "weft");
  fputc(',', f);
  json_field(f, "version", version);
  fputc(',', f);
  json_field(f, "collective", c->coll->name);
  fprintf(f, ",\"nranks\":%d,\"hosts\":%d,", c->nranks, c->nhosts);
  json_field(f, "transport", transport_name());
  fputc(',', f);
  json_field(f, "algorithm", algorithm_name());
  fprintf(f, ",\"iters\":%d,\"warmup_iters\":%d,\"agg_iters\":%d,\"check\":%d,"
             "\"blocking\":%d,\"average\":%d,\"report_cputime\":%d,\"local_register\":%d}",
          o->iters, o->warmup, o->agg, o->check, o->blocking, o->average, o->cputime,
          o->local_register);
}

static void json_row(perf_ctx_t *c, const perf_call_t *call, size_t bytes,
                     const perf_result_t res[2], double p50, double p99) {
  FILE *f = c->json;
  if (!f)
    return;
  fprintf(f, "{\"size\":%zu,\"count\":%zu,", bytes, call->counts.paramcount);
  json_field(f, "type", type_names[call->type]);
  fputc(',', f);
  json_field(f, "redop", c->coll->has_op ? op_names[call->op] : "none");
  fprintf(f, ",\"root\":%d,", c->coll->has_root ? call->root : -1);
  json_result(f, "out_of_place", &res[0]);
  fputc(',', f);
  json_result(f, "in_place", &res[1]);
  fprintf(f, ",\"p50_us\":%.3f,\"p99_us\":%.3f,", p50, p99);
  /* The algorithm weft actually ran for this row (weft_get_algorithm); the config's
   * "algorithm" is what was asked for (WEFT_ALGO, or "default"). */
  const char *algo = NULL;
  if (weft_get_algorithm(c->comm, c->coll->name, call->counts.paramcount, call->type, &algo) != WEFT_SUCCESS)
    algo = "unknown";
  json_field(f, "algorithm", algo);
  fputc(',', f);
  json_config(c);
  fputs("}\n", f);
  fflush(f);
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
    printf("%12zu  %12zu  %8s  %6s  %6d", n * es, call->counts.paramcount,
           type_names[call->type], c->coll->has_op ? op_names[call->op] : "none",
           c->coll->has_root ? call->root : -1);
  perf_result_t res[2];
  res[0] = bench(c, call, 0);
  double p50, p99;
  latency_percentiles(c, &p50, &p99); /* collective: before rank 0 prints on */
  res[1] = bench(c, call, 1);
  if (c->rank == 0) {
    printf("  %7.2f  %7.2f\n", p50, p99);
    json_row(c, call, n * es, res, p50, p99);
  }
}

static void time_test(perf_ctx_t *c, weft_datatype_t type, int op, int root) {
  perf_call_t call = {.type = type, .op = (weft_redop_t)op, .root = root,
                      .rank = c->rank, .nranks = c->nranks};
  barrier(c);
  const size_t warm_sizes[2] = {c->o.maxbytes, c->o.minbytes};
  for (int w = 0; w < 2; w++) {
    setup_call(c, &call, warm_sizes[w]);
    for (int it = 0; it < c->o.warmup; it++)
      start_coll(c, &call, 0, 1, c->stream);
    complete_coll(c);
  }
  for (size_t size = c->o.minbytes; size <= c->o.maxbytes; size = next_size(&c->o, size)) {
    setup_call(c, &call, size);
    bench_row(c, &call);
  }
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
 * Header
 * ------------------------------------------------------------------------------------ */

typedef struct {
  int32_t rank, pid, device;
  char host[64];
  char transport[16];
} perf_rank_info_t;

static int local_rank_from_env(void) {
  static const char *vars[] = {"WEFT_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                               "MPI_LOCALRANKID", "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
    if (getenv(vars[i]))
      return atoi(getenv(vars[i]));
  return 0;
}

static void print_devices(perf_ctx_t *c) {
  perf_rank_info_t me = {.rank = c->rank, .pid = (int32_t)getpid(),
                         .device = local_rank_from_env()};
  gethostname(me.host, sizeof(me.host) - 1);
  snprintf(me.transport, sizeof(me.transport), "%s", transport_name());
  perf_rank_info_t *all = calloc(c->nranks, sizeof(*all));
  if (!all)
    die(c, "calloc", WEFT_ERR_NO_MEMORY);
  PERF_CHECK(c, weft_all_gather(&me, all, sizeof(me), WEFT_UINT8, c->comm, NULL));
  for (int r = 0; c->rank == 0 && r < c->nranks; r++)
    printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] weft %s\n", all[r].rank, 0,
           (int)all[r].pid, all[r].host, (int)all[r].device, all[r].transport);
  c->nhosts = 0;
  for (int r = 0; r < c->nranks; r++) { /* a host counts at its first rank */
    int seen = 0;
    for (int q = 0; q < r && !seen; q++)
      seen = strncmp(all[q].host, all[r].host, sizeof(all[r].host)) == 0;
    c->nhosts += !seen;
  }
  free(all);
}

static void print_header(perf_ctx_t *c) {
  const perf_opts_t *o = &c->o;
  int v = 0;
  weft_get_version(&v);
  printf("# %s: weft-headers=%d.%d.%d weft-library=%d.%d.%d transport=%s\n", c->prog,
         WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH, v / 10000, v / 100 % 100,
         v % 100, transport_name());
  printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
         "iters: %d agg iters: %d validation: %d graph: 0\n",
         o->minbytes, o->maxbytes, o->stepfactor > 1 ? o->stepfactor : o->stepbytes,
         o->stepfactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->agg, o->check);
  if (o->blocking)
    printf("# Blocking Enabled: wait for completion after each collective (NULL stream)\n");
  printf("#\n# Using devices\n");
}

static void print_columns(perf_ctx_t *c) {
  const char *t = c->o.cputime ? "cputime" : "time";
  printf("#\n");
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place"
         "              latency   \n", "", "", "", "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %7s  %7s\n", "size",
         "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw",
         "#wrong", "p50", "p99");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s  %7s  %7s\n", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
         "(us)", "(us)");
}

/* ------------------------------------------------------------------------------------
 * Flags
 * ------------------------------------------------------------------------------------ */

/* In weft_comm_init_from_env's order: the most specific launcher first. */
static const char *const rank_vars[] = {"WEFT_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                        "SLURM_PROCID"};

/* The launcher's rank before weft knows it, so that only rank 0 prints usage errors;
 * -1 when no launcher started us. */
static int env_rank(void) {
  for (size_t i = 0; i < sizeof(rank_vars) / sizeof(rank_vars[0]); i++)
    if (getenv(rank_vars[i]))
      return atoi(getenv(rank_vars[i]));
  return -1;
}

/* "64", "1K", "32M", "1G" (powers of 1024, fractions allowed), as nccl-tests. */
static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0)
    return -1;
  double unit = 1;
  switch (*end) {
  case 'G': case 'g': unit = 1024.0 * 1024 * 1024; end++; break;
  case 'M': case 'm': unit = 1024.0 * 1024; end++; break;
  case 'K': case 'k': unit = 1024.0; end++; break;
  default: break;
  }
  if (*end)
    return -1;
  *out = (size_t)(v * unit);
  return 0;
}

static int parse_name(const char *s, const char *const *names, int n) {
  if (strcmp(s, "all") == 0)
    return -1;
  for (int i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0)
      return i;
  static const struct { const char *alias; int type; } aliases[] = {
      {"float16", WEFT_FLOAT16}, {"float32", WEFT_FLOAT32}, {"float64", WEFT_FLOAT64},
      {"bf16", WEFT_BFLOAT16}};
  for (size_t i = 0; names == type_names && i < sizeof(aliases) / sizeof(aliases[0]); i++)
    if (strcmp(s, aliases[i].alias) == 0)
      return aliases[i].type;
  return -2;
}

static void usage(FILE *f, const char *prog) {
  fprintf(f,
          "USAGE: %s (one rank per process: weftrun -n N, mpirun, srun or torchrun)\n\t"
          "[-t,--nthreads <num threads>] (must be 1)\n\t"
          "[-g,--ngpus <gpus per thread>] (must be 1)\n\t"
          "[-b,--minbytes <min size in bytes>] (default 32M)\n\t"
          "[-e,--maxbytes <max size in bytes>] (default 32M)\n\t"
          "[-i,--stepbytes <increment size>] (default 1M)\n\t"
          "[-f,--stepfactor <increment factor>] (default 1: use -i)\n\t"
          "[-n,--iters <iteration count>] (default 20)\n\t"
          "[-m,--agg_iters <aggregated iteration count>] (default 1)\n\t"
          "[-w,--warmup_iters <warmup iteration count>] (default 5)\n\t"
          "[-c,--check <0/1>] (default 1)\n\t"
          "[-o,--op <sum/prod/min/max/avg/all>] (default sum)\n\t"
          "[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/all>]"
          " (default float)\n\t"
          "[-r,--root <root/all>] (rooted collectives; default 0; -1 or all: every root, "
          "one row per root)\n\t"
          "[-z,--blocking <0/1>] (1: blocking calls on the NULL stream)\n\t"
          "[-y,--stream_null <0/1>] (same as -z)\n\t"
          "[-T,--timeout <time in seconds>] (weft's deadline for every wait)\n\t"
          "[-C,--report_cputime <0/1>]\n\t"
          "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>]\n\t"
          "[-R,--local_register <0/1/2>] (1 or 2: buffers from weft_mem_alloc, registered as\n\t"
          "    windows with weft_comm_window_register, as nccl-tests' -R with ncclMemAlloc:\n\t"
          "    collectives from WEFT_DIRECT_MIN_BYTES run direct; default 0)\n\t"
          "[-J,--json <file>] (rank 0 appends one JSON object per result row: every figure,\n\t"
          "    and the configuration: version, ranks, hosts, transport, algorithm)\n\t"
          "[-h,--help]\n"
          "Columns beyond nccl-tests: p50 and p99 (us), percentiles of single out-of-place\n"
          "calls, each timed on its own in an extra pass of -n blocking (NULL-stream) calls\n"
          "after the timed loop (with -z 1, the timed loop's own calls), each call's time\n"
          "combined over ranks as -a says. time/algbw/busbw come from the timed loop, as in\n"
          "nccl-tests: -n calls enqueued on a stream and synchronized once.\n",
          prog);
}

/* Applies one flag; returns NULL, or what is wrong with it. */
static const char *parse_option(perf_opts_t *o, int ch, const char *arg) {
  long v = strtol(arg, NULL, 0);
  switch (ch) {
  case 't':
  case 'g': return v != 1 ? "weft runs one rank per process: -t and -g must be 1" : NULL;
  case 'G': return v != 0 ? "-G (CUDA graphs) is not supported" : NULL;
  case 'p': return NULL; /* parallel init: ranks are processes, always parallel */
  case 'b': return parse_size(arg, &o->minbytes) ? "invalid size specified for 'minbytes'" : NULL;
  case 'e': return parse_size(arg, &o->maxbytes) ? "invalid size specified for 'maxbytes'" : NULL;
  case 'i': return parse_size(arg, &o->stepbytes) ? "invalid size for 'stepbytes'" : NULL;
  case 'f': o->stepfactor = v > 0 ? (size_t)v : 1; return NULL;
  case 'n': o->iters = (int)v; return v < 1 ? "-n needs at least 1 iteration" : NULL;
  case 'm': o->agg = (int)v; return v < 1 ? "-m needs at least 1" : NULL;
  case 'w': o->warmup = (int)v; return v < 0 ? "-w must be >= 0" : NULL;
  case 'c': o->check = v != 0; return NULL;
  case 'z':
  case 'y': o->blocking |= v != 0; return NULL;
  case 'T': o->timeout_s = (int)v; return NULL;
  case 'C': o->cputime = v != 0; return NULL;
  case 'a': o->average = (int)v; return v < 0 || v > 3 ? "-a must be 0, 1, 2 or 3" : NULL;
  case 'r':
    o->root = strcmp(arg, "all") == 0 ? -1 : (int)v;
    return o->root < -1 ? "-r must be a rank, -1 or all" : NULL;
  case 'J': o->json_path = arg; return NULL;
  case 'R': o->local_register = (int)v; return v < 0 || v > 2 ? "-R must be 0, 1 or 2" : NULL;
  case 'o':
    o->op = parse_name(arg, op_names, WEFT_NUM_OPS);
    return o->op == -2 ? "invalid op (sum/prod/min/max/avg/all)" : NULL;
  case 'd':
    o->type = parse_name(arg, type_names, WEFT_NUM_DATATYPES);
    return o->type == -2 ? "invalid datatype" : NULL;
  default: return "unknown option";
  }
}

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, perf_ctx_t *c) {
  static const struct option longopts[] = {
      {"nthreads", required_argument, 0, 't'},   {"ngpus", required_argument, 0, 'g'},
      {"minbytes", required_argument, 0, 'b'},   {"maxbytes", required_argument, 0, 'e'},
      {"stepbytes", required_argument, 0, 'i'},  {"stepfactor", required_argument, 0, 'f'},
      {"iters", required_argument, 0, 'n'},      {"agg_iters", required_argument, 0, 'm'},
      {"warmup_iters", required_argument, 0, 'w'}, {"parallel_init", required_argument, 0, 'p'},
      {"check", required_argument, 0, 'c'},      {"op", required_argument, 0, 'o'},
      {"datatype", required_argument, 0, 'd'},   {"root", required_argument, 0, 'r'},
      {"blocking", required_argument, 0, 'z'},   {"stream_null", required_argument, 0, 'y'},
      {"timeout", required_argument, 0, 'T'},    {"cudagraph", required_argument, 0, 'G'},
      {"report_cputime", required_argument, 0, 'C'}, {"average", required_argument, 0, 'a'},
      {"json", required_argument, 0, 'J'},       {"local_register", required_argument, 0, 'R'},
      {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
  perf_opts_t *o = &c->o;
  int quiet = env_rank() > 0, ch;
  opterr = !quiet;
  while ((ch = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:p:c:o:d:r:z:y:T:G:C:a:J:R:h", longopts,
                           NULL)) != -1) {
    if (ch == 'h' || ch == '?' || ch == ':') {
      if (!quiet)
        usage(ch == 'h' ? stdout : stderr, c->prog);
      return ch == 'h' ? 0 : 2;
    }
    const char *bad = parse_option(o, ch, optarg);
    if (bad) {
      if (!quiet)
        fprintf(stderr, "%s: %s ('%s')\n", c->prog, bad, optarg);
      return 2;
    }
  }
  if (o->minbytes > o->maxbytes) {
    if (!quiet)
      fprintf(stderr, "%s: invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", c->prog,
              o->minbytes, o->maxbytes);
    return 2;
  }
  return -1;
}

/* ------------------------------------------------------------------------------------
 * Setup and main
 * ------------------------------------------------------------------------------------ */

/* Page-aligned and touched, so the first timed call does not pay the page faults. With
 * -R, from weft_mem_alloc and registered as a window of the communicator. */
static char *alloc_buffer(perf_ctx_t *c, size_t bytes, int reg) {
  if (bytes == 0)
    bytes = 1;
  if (reg) {
    void *m;
    weft_window_t w;
    PERF_CHECK(c, weft_mem_alloc(&m, bytes));
    memset(m, 0, bytes);
    PERF_CHECK(c, weft_comm_window_register(c->comm, m, bytes, &w, 0));
    return m;
  }
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    die(c, "mmap of the benchmark buffers", WEFT_ERR_NO_MEMORY);
  memset(p, 0, bytes);
  return p;
}

static void setup(perf_ctx_t *c) {
  weft_config_t cfg = WEFT_CONFIG_INITIALIZER;
  if (c->o.timeout_s > 0)
    cfg.timeout_ms = c->o.timeout_s * 1000;
  /* without a launcher: one rank (weft says so), as nccl-tests without MPI */
  PERF_CHECK(c, weft_comm_init_from_env(&c->comm, &cfg));
  PERF_CHECK(c, weft_comm_user_rank(c->comm, &c->rank));
  PERF_CHECK(c, weft_comm_count(c->comm, &c->nranks));
  if (!c->o.blocking)
    PERF_CHECK(c, weft_stream_create(&c->stream));
  /* counts of one-byte elements are byte counts; every type needs at most these */
  perf_counts_t max;
  c->coll->get_counts(c->o.maxbytes, c->nranks, &max);
  c->recvbytes = max.recvcount;
  c->bufbytes = max.sendcount > max.recvcount ? max.sendcount : max.recvcount;
  /* both as large as the larger side, as nccl-tests: in-place runs send from recvbuf */
  c->sendbuf = alloc_buffer(c, c->bufbytes, c->o.local_register);
  c->recvbuf = alloc_buffer(c, c->bufbytes, c->o.local_register);
  c->expected = alloc_buffer(c, c->recvbytes, 0);
  c->lat = calloc((size_t)c->o.iters, sizeof(double));
  if (!c->lat)
    die(c, "calloc of the latency samples", WEFT_ERR_NO_MEMORY);
}

/* Checks that need the communicator: the root, and rank 0 opening the -J file. Every
 * rank reaches the same verdict, so all of them stop together. Returns -1 to go on, else
 * the exit status. */
static int check_setup(perf_ctx_t *c) {
  if (c->coll->has_root && c->o.root >= c->nranks) {
    if (c->rank == 0)
      fprintf(stderr, "%s: root %d outside [0, %d) (-r)\n", c->prog, c->o.root, c->nranks);
    return 2;
  }
  int32_t ok = 1;
  if (c->rank == 0 && c->o.json_path) {
    c->json = fopen(c->o.json_path, "a");
    if (!c->json) {
      fprintf(stderr, "%s: rank 0: cannot open -J file %s: %s\n", c->prog, c->o.json_path,
              strerror(errno));
      ok = 0;
    }
  }
  PERF_CHECK(c, weft_broadcast(&ok, &ok, 1, WEFT_INT32, 0, c->comm, NULL));
  return ok ? -1 : 2;
}

static void teardown(perf_ctx_t *c) {
  if (c->stream)
    PERF_CHECK(c, weft_stream_destroy(c->stream));
  PERF_CHECK(c, weft_comm_destroy(c->comm));
  c->comm = NULL;
  if (c->o.local_register) { /* the windows went with the communicator */
    PERF_CHECK(c, weft_mem_free(c->sendbuf));
    PERF_CHECK(c, weft_mem_free(c->recvbuf));
  } else {
    munmap(c->sendbuf, c->bufbytes ? c->bufbytes : 1);
    munmap(c->recvbuf, c->bufbytes ? c->bufbytes : 1);
  }
  munmap(c->expected, c->recvbytes ? c->recvbytes : 1);
  free(c->lat);
  if (c->json && fclose(c->json) != 0)
    fprintf(stderr, "%s: rank 0: writing -J file %s: %s\n", c->prog, c->o.json_path,
            strerror(errno));
  c->json = NULL;
}

int perf_main(int argc, char **argv, const perf_coll_t *coll) {
  perf_ctx_t c = {.coll = coll, .prog = basename(argv[0])};
  c.o = (perf_opts_t){.minbytes = 32u << 20, .maxbytes = 32u << 20, .stepbytes = 1u << 20,
                      .stepfactor = 1, .iters = 20, .warmup = 5, .agg = 1, .check = 1,
                      .average = 1, .type = WEFT_FLOAT32, .op = WEFT_SUM, .root = 0};
  c.rank = env_rank() > 0 ? env_rank() : 0; /* for messages until weft knows */
  setlinebuf(stdout);
  int rc = parse_args(argc, argv, &c);
  if (rc >= 0)
    return rc;

  setup(&c);
  rc = check_setup(&c);
  if (rc >= 0) {
    teardown(&c);
    return rc;
  }
  if (c.rank == 0)
    print_header(&c);
  print_devices(&c);
  if (c.rank == 0)
    print_columns(&c);
  run_tests(&c);
  teardown(&c);

  if (c.rank == 0) {
    printf("# Out of bounds values : %d %s\n", c.errors, c.errors ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n", c.bw_count ? c.bw_sum / c.bw_count : 0.0);
    printf("#\n");
    if (c.errors)
      printf("# Errors: %d results had wrong elements\n", c.errors);
  }
  return c.errors ? 1 : 0;
}

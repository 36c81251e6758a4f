/*
 * output.c: what the perf programs print, in nccl-tests' formats (src/util.cu of
 * nccl-tests >= 2.17; these follow 2.19), so that scripts written for nccl-tests read weft's:
 *  - text: "# nccl-tests version ..." (with weft's versions), "# Collective test starting",
 *    the options line, "# Using devices" with a line per rank, the column heads, one row
 *    per size of 13 columns with nccl-tests' widths (figures made to fit their width at
 *    every size: %.2f, else %.1f, else %.0f, else an exponent), the footer and
 *    "# Collective test concluded". Optional columns come where nccl-tests puts them
 *    (-I after each half, -S at the end); weft's -L p50/p99 come last of all.
 *  - -J FILE: nccl-tests' JSON document (version 3: version, start_time, args, env,
 *    nccl_version, config with devices, results, out_of_bounds, average_bus_bandwidth,
 *    errors, end_time; the same keys and value types), with weft's own figures under a
 *    "weft" key in config and in each result.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "perf/perf_impl.h"

/* The nccl-tests release whose output format this file follows. */
#define NCCL_TESTS_FORMAT "2.19.6"
#define JSON_FILE_VERSION 3

extern char **environ;

void perf_float_str(double value, int width, char *out) {
  if (snprintf(out, (size_t)width + 1, "%*.2f", width, value) <= width) return;
  if (snprintf(out, (size_t)width + 1, "%*.1f", width, value) <= width) return;
  if (snprintf(out, (size_t)width + 1, "%*.0f", width, value) <= width) return;
  snprintf(out, (size_t)width + 1, width >= 7 ? "%*.1e" : "%*.0e", width, value);
}

static const char *blocking_line(const perf_opts_t *o) {
  switch (o->blocking) {
  case 1: return "# Blocking Enabled: wait and barrier after each inner iteration (-m) \n";
  case 2: return "# Blocking Enabled: wait after each inner iteration (-m), no barrier \n";
  case 3: return "# Blocking Enabled: wait and barrier after each outer iteration (-n); "
                 "time excludes barrier \n";
  default: return o->stream_null ? "# Blocking Enabled: calls on the NULL stream, no barrier \n" : "";
  }
}

static const char *register_line(int local_register) {
  switch (local_register) {
  case 1: return "# Local registration (-R 1): the benchmark's own buffers registered with "
                 "weft_comm_register (which adopts them); collectives from WEFT_DIRECT_MIN_BYTES run direct\n";
  case 2: return "# Symmetric registration (-R 2): buffers from weft_mem_alloc registered as windows "
                 "(weft_comm_window_register); collectives from WEFT_DIRECT_MIN_BYTES run direct\n";
  default: return "";
  }
}

void perf_print_header(perf_ctx_t *c) {
  const perf_opts_t *o = &c->o;
  int v = 0;
  weft_get_version(&v);
  printf("# nccl-tests version %s-compatible (weft %d.%d.%d) weft-headers=%d weft-library=%d\n",
         NCCL_TESTS_FORMAT, v / 10000, v / 100 % 100, v % 100, WEFT_VERSION_CODE, v);
  printf("# Collective test starting: %s\n", c->prog);
  printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
         "agg iters: %d validation: %d graph: 0 unalign: %d\n",
         o->minbytes, o->maxbytes, o->stepfactor > 1 ? o->stepfactor : o->stepbytes,
         o->stepfactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->agg, o->check, o->unalign);
  printf("%s%s", blocking_line(o), register_line(o->local_register));
  if (o->per_iter) {
    printf("# Per-Iteration Report: wall-clock timing, each iteration waited for; i_* uses max "
           "over process rows");
    if (o->per_iter_skip) printf("; summary skips first %d iterations", o->per_iter_skip);
    printf(" \n");
  }
  printf("#\n# Using devices\n");
}

void perf_print_device(const char *line) { printf("%s", line); }

void perf_print_columns(perf_ctx_t *c) {
  const perf_opts_t *o = &c->o;
  const char *t = o->cputime ? "cputime" : "time";
  const char *ts = o->timestamps ? "timestamp" : "", *tsfmt = o->timestamps ? "%Y-%m-%d %H:%M:%S" : "";
  int pad = o->timestamps ? 19 : 0;
  printf("#\n");
  if (o->per_iter) {
    printf("# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)                "
           "                in-place (+ per-iteration)", "", "", "", "", "");
    printf("%s\n", o->latency ? "                         single-call" : "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  "
           "%6s  %7s  %7s  %7s  %7s %*s", "size", "count", "type", "redop", "root", t, "algbw",
           "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", t, "algbw", "busbw", "#wrong",
           "i_min", "i_max", "i_p99", "i_cv%", pad, ts);
  } else {
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place   "
           "       ", "", "", "", "", "");
    printf("%s\n", o->latency ? "  single-call" : "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s", "size",
           "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw",
           "#wrong", pad, ts);
  }
  printf("%s\n", o->latency ? "     p50      p99" : ""); /* after the heads' trailing space */
  if (o->per_iter)
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  "
           "%6s  %7s  %7s  %7s  %7s %*s", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
           "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
           "(us)", "(us)", "(%)", pad, tsfmt);
  else
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
           "", pad, tsfmt);
  printf("%s\n", o->latency ? "    (us)     (us)" : "");
}

void perf_print_row_start(perf_ctx_t *c, size_t bytes, size_t count, const char *type,
                          const char *op, int root) {
  printf("%12zu  %12zu  %8s  %6s  %6d", bytes, count, type, op, root);
  perf_json_row_start(c->json, bytes, count, type, op, root);
}

void perf_print_result(perf_ctx_t *c, const perf_result_t *r, int out_of_place) {
  char t[8], alg[7], bus[7];
  perf_float_str(r->usec, 7, t);
  perf_float_str(r->algbw, 6, alg);
  perf_float_str(r->busbw, 6, bus);
  if (r->checked)
    printf("  %7s  %6s  %6s  %6g", t, alg, bus, (double)r->wrong);
  else
    printf("  %7s  %6s  %6s    N/A", t, alg, bus);
  perf_json_result(c->json, r, c->o.cputime, out_of_place);
}

void perf_print_iter_stats(perf_ctx_t *c, const perf_iter_stats_t *s, int out_of_place) {
  char mn[8], mx[8], p99[8], cv[8];
  perf_float_str(s->min * 1e6, 7, mn);
  perf_float_str(s->max * 1e6, 7, mx);
  perf_float_str(s->p99 * 1e6, 7, p99);
  perf_float_str(s->avg > 0 ? s->stdev / s->avg * 100.0 : 0.0, 7, cv);
  printf("  %7s  %7s  %7s  %7s", mn, mx, p99, cv);
  perf_json_iter_stats(c->json, s, out_of_place);
}

void perf_print_row_end(perf_ctx_t *c, double p50, double p99, const char *algorithm) {
  if (c->o.timestamps) {
    char when[32];
    time_t now = time(NULL);
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime(&now));
    printf("%21s", when);
  }
  if (c->o.latency) {
    char a[8], b[8];
    perf_float_str(p50, 7, a);
    perf_float_str(p99, 7, b);
    printf("  %7s  %7s", a, b);
  }
  printf("\n");
  perf_json_row_end(c->json, c->o.iters, algorithm, c->o.latency, p50, p99);
}

/* nccl-tests' "GPU memory usage" line, for the host memory weft uses (-M). */
static void print_memory(const perf_ctx_t *c) {
  const long parts[3] = {c->mem_init, c->mem_buffers, c->mem_coll};
  const char *names[3] = {"Initialization", "User-Allocated", "Collective"};
  char line[256];
  size_t n = 0;
  long total = 0;
  for (int i = 0; i < 3; i++) {
    double v = (double)parts[i];
    const char *unit = " B";
    if (v >= 1024.0 * 1024 * 1024) { v /= 1024.0 * 1024 * 1024; unit = " GB"; }
    else if (v >= 1024.0 * 1024) { v /= 1024.0 * 1024; unit = " MB"; }
    else if (v >= 1024.0) { v /= 1024.0; unit = " KB"; }
    n += (size_t)snprintf(line + n, sizeof(line) - n, "%s %.*f%s | ", names[i],
                          v < 10 ? 2 : v < 100 ? 1 : 0, v, unit);
    total += parts[i];
  }
  snprintf(line + n, sizeof(line) - n, "Total  %.2f MB", (double)total / (1024.0 * 1024));
  printf("# %-20s : %s\n", "Host memory usage", line);
}

void perf_print_footer(perf_ctx_t *c, double avg_bw, double min_bw) {
  printf("# %-20s : %d %s\n", "Out of bounds values", c->errors, c->errors ? "FAILED" : "OK");
  printf("# %-20s : %g %s\n", "Avg bus bandwidth", avg_bw,
         min_bw < 0 ? "" : avg_bw < min_bw * 0.9 ? "FAILED" : "OK");
  printf("#\n");
  printf("# Collective test concluded: %s\n", c->prog);
  if (c->o.memory_report) print_memory(c);
  printf("#\n");
  printf("\n");
}

/* ------------------------------------------------------------------------------------
 * The JSON document. A small writer: a stack of "has this object/list a member yet".
 * ------------------------------------------------------------------------------------ */

struct perf_json {
  FILE *f;
  int depth;
  char some[16]; /* per open object/list: a member was written (a comma is due) */
  int after_key;
};

static void j_sep(perf_json_t *j) {
  if (j->after_key) { j->after_key = 0; return; }
  if (j->depth > 0 && j->some[j->depth - 1]) fputc(',', j->f);
  if (j->depth > 0) j->some[j->depth - 1] = 1;
}

static void j_open(perf_json_t *j, char ch) {
  j_sep(j);
  fputc(ch, j->f);
  j->some[j->depth++] = 0;
}

static void j_close(perf_json_t *j, char ch) {
  j->depth--;
  fputc(ch, j->f);
}

/* s escaped as nccl-tests does (", \, / escaped; \t \n; other control bytes as \u). */
static void j_str(perf_json_t *j, const char *s) {
  j_sep(j);
  fputc('"', j->f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\' || *p == '/') fprintf(j->f, "\\%c", *p);
    else if (*p == '\n') fputs("\\n", j->f);
    else if (*p == '\t') fputs("\\t", j->f);
    else if (*p < 0x20) fprintf(j->f, "\\u%04x", *p);
    else fputc(*p, j->f);
  }
  fputc('"', j->f);
}

static void j_key(perf_json_t *j, const char *k) {
  j_str(j, k);
  fputc(':', j->f);
  j->after_key = 1;
}

static void j_int(perf_json_t *j, long long v) { j_sep(j); fprintf(j->f, "%lld", v); }
static void j_null(perf_json_t *j) { j_sep(j); fputs("null", j->f); }
/* nccl-tests writes booleans as the strings "true" and "false". */
static void j_bool(perf_json_t *j, int v) { j_str(j, v ? "true" : "false"); }

static void j_double(perf_json_t *j, double v) {
  j_sep(j);
  if (v != v) fputs("\"nan\"", j->f);
  else fprintf(j->f, "%lf", v);
}

static void j_now(perf_json_t *j) {
  char when[64];
  time_t now = time(NULL);
  strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime(&now));
  j_str(j, when);
}

/* The environment, less what holds a job's secret (the unique id carries it). */
static void j_env(perf_json_t *j) {
  j_open(j, '[');
  for (char **e = environ; *e; e++)
    if (strncmp(*e, "WEFT_SECRET=", 12) != 0 && strncmp(*e, "WEFT_UNIQUE_ID=", 15) != 0)
      j_str(j, *e);
  j_close(j, ']');
}

static FILE *open_new(const char *path, char *used, size_t len) {
  snprintf(used, len, "%s", path);
  for (int i = 0; i < 1000; i++) {
    int fd = open(used, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return fdopen(fd, "w");
    if (errno != EEXIST) return NULL;
    snprintf(used, len, "%s.%d", path, i);
  }
  return NULL;
}

perf_json_t *perf_json_open(const char *path, int argc, char **argv) {
  char used[4096];
  FILE *f = open_new(path, used, sizeof(used));
  perf_json_t *j = f ? calloc(1, sizeof(*j)) : NULL;
  if (j == NULL) {
    printf("# skipping json output; %s not accessible\n", used);
    if (f) fclose(f);
    return NULL;
  }
  printf("# Writing JSON output to %s\n", used);
  j->f = f;
  int v = 0;
  weft_get_version(&v);
  j_open(j, '{');
  j_key(j, "version"); j_int(j, JSON_FILE_VERSION);
  j_key(j, "start_time"); j_now(j);
  j_key(j, "args"); j_open(j, '[');
  for (int i = 0; i < argc; i++) j_str(j, argv[i]);
  j_close(j, ']');
  j_key(j, "env"); j_env(j);
  j_key(j, "nccl_version"); j_int(j, v); /* weft's, coded as NCCL's: major*10000+minor*100+patch */
  return j;
}

void perf_json_config(perf_json_t *j, const perf_ctx_t *c) {
  if (j == NULL) return;
  const perf_opts_t *o = &c->o;
  j_key(j, "config"); j_open(j, '{');
  j_key(j, "nthreads"); j_int(j, 1);
  j_key(j, "ngpus"); j_int(j, 1);
  j_key(j, "minimum_bytes"); j_int(j, (long long)o->minbytes);
  j_key(j, "maximum_bytes"); j_int(j, (long long)o->maxbytes);
  j_key(j, o->stepfactor > 1 ? "step_factor" : "step_bytes");
  j_int(j, (long long)(o->stepfactor > 1 ? o->stepfactor : o->stepbytes));
  j_key(j, "warmup_iters"); j_int(j, o->warmup);
  j_key(j, "iterations"); j_int(j, o->iters);
  j_key(j, "aggregated_iterations"); j_int(j, o->agg);
  j_key(j, "validation"); j_int(j, o->check);
  j_key(j, "graph"); j_int(j, 0);
  j_key(j, "blocking_collectives"); j_bool(j, o->blocking);
  j_key(j, "per_iter_timing"); j_bool(j, o->per_iter);
  j_key(j, "per_iter_skip"); j_int(j, o->per_iter_skip);
  j_key(j, "parallel_init"); j_bool(j, o->parallel_init);
  int v = 0;
  weft_get_version(&v);
  char version[32], *algo = getenv("WEFT_ALGO"), *transport = getenv("WEFT_TRANSPORT");
  snprintf(version, sizeof(version), "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  j_key(j, "weft"); j_open(j, '{');
  j_key(j, "version"); j_str(j, version);
  j_key(j, "collective"); j_str(j, c->coll->name);
  j_key(j, "nranks"); j_int(j, c->nranks);
  j_key(j, "hosts"); j_int(j, c->nhosts);
  j_key(j, "transport"); j_str(j, transport && *transport ? transport : "auto");
  j_key(j, "algorithm"); j_str(j, algo && *algo ? algo : "default");
  j_key(j, "blocking"); j_int(j, o->blocking);
  j_key(j, "average"); j_int(j, o->average);
  j_key(j, "local_register"); j_int(j, o->local_register);
  j_close(j, '}');
  j_key(j, "devices"); j_open(j, '[');
}

void perf_json_device(perf_json_t *j, int rank, int pid, const char *host, int device,
                      const char *info) {
  if (j == NULL) return;
  j_open(j, '{');
  j_key(j, "rank"); j_int(j, rank);
  j_key(j, "group"); j_int(j, 0);
  j_key(j, "pid"); j_int(j, pid);
  j_key(j, "hostname"); j_str(j, host);
  j_key(j, "device"); j_int(j, device);
  j_key(j, "device_hex"); j_str(j, "cpu");
  j_key(j, "device_info"); j_str(j, info);
  j_close(j, '}');
}

void perf_json_results_start(perf_json_t *j) {
  if (j == NULL) return;
  j_close(j, ']'); /* devices */
  j_close(j, '}'); /* config */
  j_key(j, "results"); j_open(j, '[');
}

void perf_json_row_start(perf_json_t *j, size_t bytes, size_t count, const char *type,
                         const char *op, int root) {
  if (j == NULL) return;
  char rootstr[16];
  snprintf(rootstr, sizeof(rootstr), "%6d", root);
  j_open(j, '{');
  j_key(j, "size"); j_int(j, (long long)bytes);
  j_key(j, "count"); j_int(j, (long long)count);
  j_key(j, "type"); j_str(j, type);
  j_key(j, "redop"); j_str(j, op);
  j_key(j, "root"); j_str(j, rootstr); /* nccl-tests: the printed, padded text */
}

void perf_json_result(perf_json_t *j, const perf_result_t *r, int cputime, int out_of_place) {
  if (j == NULL) return;
  j_key(j, out_of_place ? "out_of_place" : "in_place"); j_open(j, '{');
  j_key(j, cputime ? "cpu_time" : "time"); j_double(j, r->usec);
  j_key(j, "alg_bw"); j_double(j, r->algbw);
  j_key(j, "bus_bw"); j_double(j, r->busbw);
  j_key(j, "nwrong");
  if (r->checked) j_double(j, (double)r->wrong);
  else j_null(j);
  j_close(j, '}');
}

void perf_json_iter_stats(perf_json_t *j, const perf_iter_stats_t *s, int out_of_place) {
  if (j == NULL) return;
  j_key(j, out_of_place ? "out_of_place_per_iter" : "in_place_per_iter"); j_open(j, '{');
  j_key(j, "skipped_iterations"); j_int(j, s->skipped);
  j_key(j, "min_us"); j_double(j, s->min * 1e6);
  j_key(j, "max_us"); j_double(j, s->max * 1e6);
  j_key(j, "avg_us"); j_double(j, s->avg * 1e6);
  j_key(j, "p50_us"); j_double(j, s->p50 * 1e6);
  j_key(j, "p95_us"); j_double(j, s->p95 * 1e6);
  j_key(j, "p99_us"); j_double(j, s->p99 * 1e6);
  j_key(j, "stdev_us"); j_double(j, s->stdev * 1e6);
  j_key(j, "cv_pct"); j_double(j, s->avg > 0 ? s->stdev / s->avg * 100.0 : 0.0);
  j_key(j, "times_us"); j_open(j, '[');
  for (int i = 0; i < s->n + s->skipped; i++) j_double(j, s->times[i] * 1e6);
  j_close(j, ']');
  j_close(j, '}');
}

void perf_json_row_end(perf_json_t *j, int iters, const char *algorithm, int latency, double p50,
                       double p99) {
  if (j == NULL) return;
  j_key(j, "actual_iterations"); j_int(j, iters);
  j_key(j, "experiment_name"); j_str(j, "");
  j_key(j, "weft"); j_open(j, '{');
  j_key(j, "algorithm"); j_str(j, algorithm);
  if (latency) {
    j_key(j, "p50_us"); j_double(j, p50);
    j_key(j, "p99_us"); j_double(j, p99);
  }
  j_close(j, '}');
  j_close(j, '}');
  fflush(j->f);
}

void perf_json_close(perf_json_t *j, int errors, double avg_bw, double min_bw,
                     const char *last_error) {
  if (j == NULL) return;
  j_close(j, ']'); /* results */
  j_key(j, "out_of_bounds"); j_open(j, '{');
  j_key(j, "count"); j_int(j, errors);
  j_key(j, "okay"); j_bool(j, errors == 0);
  j_close(j, '}');
  j_key(j, "average_bus_bandwidth"); j_open(j, '{');
  j_key(j, "bandwidth"); j_double(j, avg_bw);
  j_key(j, "okay");
  if (min_bw < 0) j_str(j, "unchecked");
  else j_bool(j, avg_bw >= min_bw * 0.9);
  j_close(j, '}');
  j_key(j, "errors"); j_open(j, '[');
  if (last_error != NULL && *last_error) j_str(j, last_error);
  j_close(j, ']');
  j_key(j, "end_time"); j_now(j);
  j_close(j, '}');
  fputc('\n', j->f);
  fclose(j->f);
  free(j);
}

/* channel_probe.c: would parallel channels make a large all-reduce faster on this machine?
 *
 * NCCL splits a large operation over channels, each driven by its own CUDA block, so more
 * SMs copy and reduce at once. weft's CPU analogue is C communicators per rank, each
 * driven by its own thread (a stream's worker), each all-reducing 1/C of the buffer. This
 * program measures exactly that: for C = 1 .. MAXC it enqueues one all-reduce of count/C
 * floats on each of C streams (C communicators, built from unique ids rank 0 broadcasts
 * over the first one), synchronizes them all, and prints the median time and busbw
 * (2 (n-1)/n x bytes / time, nccl-tests' all-reduce factor) of ITERS repetitions. If C = 2
 * is not faster than C = 1, channels would only add threads competing for the same cores
 * and memory bandwidth, and weft keeps one.
 *
 *   weftrun -n 2 ./channel_probe [-b BYTES] [-c MAXC] [-n ITERS]
 * Defaults: 64 MiB, up to 4 channels, 10 iterations (after 2 warm-up rounds). Results are
 * checked: every element must equal the sum over ranks of their inputs. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <weft.h>

#define MAXCH 8

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void check(weft_status_t st, const char *what, int rank) {
  if (st == WEFT_SUCCESS) return;
  fprintf(stderr, "channel_probe: rank %d: %s: %s\n", rank, what, weft_get_error_string(st));
  exit(1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Comms 1 .. maxc-1 from ids rank 0 makes and broadcasts over comms[0]. */
static void make_comms(weft_comm_t *comms, int maxc, int nranks, int rank) {
  for (int c = 1; c < maxc; c++) {
    weft_unique_id_t id;
    if (rank == 0) check(weft_get_unique_id(&id), "get_unique_id", rank);
    check(weft_broadcast(&id, &id, sizeof id, WEFT_UINT8, 0, comms[0], NULL), "broadcast id", rank);
    check(weft_comm_init_rank(&comms[c], nranks, id, rank), "comm_init_rank", rank);
  }
}

/* One all-reduce split over C channels; returns its time in us. */
static double run_split(float *buf, size_t count, int C, weft_comm_t *comms, weft_stream_t *streams, int rank) {
  size_t per = count / (size_t)C;
  double t0 = now_us();
  for (int c = 0; c < C; c++) {
    size_t n = c == C - 1 ? count - per * (size_t)(C - 1) : per;
    check(weft_all_reduce(buf + per * (size_t)c, buf + per * (size_t)c, n, WEFT_FLOAT32, WEFT_SUM, comms[c],
                          streams[c]),
          "all_reduce", rank);
  }
  for (int c = 0; c < C; c++) check(weft_stream_synchronize(streams[c]), "stream_synchronize", rank);
  return now_us() - t0;
}

int main(int argc, char **argv) {
  size_t bytes = (size_t)64 << 20;
  int maxc = 4, iters = 10, opt;
  while ((opt = getopt(argc, argv, "b:c:n:")) != -1) {
    if (opt == 'b') {
      char *end;
      bytes = strtoull(optarg, &end, 0);
      bytes <<= *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0; /* 64M, 512K */
    }
    else if (opt == 'c') maxc = atoi(optarg);
    else if (opt == 'n') iters = atoi(optarg);
    else return fprintf(stderr, "usage: weftrun -n N channel_probe [-b BYTES] [-c MAXC] [-n ITERS]\n"), 2;
  }
  if (maxc < 1 || maxc > MAXCH || iters < 1 || bytes < 4 * (size_t)maxc) return fprintf(stderr, "bad arguments\n"), 2;
  weft_comm_t comms[MAXCH] = {0};
  weft_stream_t streams[MAXCH];
  int rank, nranks;
  check(weft_comm_init_from_env(&comms[0], NULL), "comm_init_from_env", -1);
  weft_comm_user_rank(comms[0], &rank);
  weft_comm_count(comms[0], &nranks);
  make_comms(comms, maxc, nranks, rank);
  for (int c = 0; c < maxc; c++) check(weft_stream_create(&streams[c]), "stream_create", rank);
  size_t count = bytes / sizeof(float);
  float *buf = malloc(count * sizeof(float));
  if (rank == 0) printf("# channel_probe: %d ranks, all-reduce of %zu B float sum, median of %d\n#  C   time_us  busbw_GB/s\n", nranks, bytes, iters);
  int wrong = 0;
  for (int C = 1; C <= maxc; C++) {
    double t[64];
    int n = iters < 64 ? iters : 64;
    for (int i = -2; i < n; i++) {
      for (size_t k = 0; k < count; k++) buf[k] = (float)((k + (size_t)rank) % 8);
      double us = run_split(buf, count, C, comms, streams, rank);
      if (i >= 0) t[i] = us;
      for (size_t k = 0; k < count; k += 4097) {
        float want = 0;
        for (int r = 0; r < nranks; r++) want += (float)((k + (size_t)r) % 8);
        wrong += buf[k] != want;
      }
    }
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    double med = t[n / 2];
    if (rank == 0) printf("  %2d %9.0f %10.2f\n", C, med, 2.0 * (nranks - 1) / nranks * (double)bytes / med / 1e3);
  }
  if (rank == 0) printf("# wrong elements (sampled): %d\n", wrong);
  for (int c = 0; c < maxc; c++) weft_stream_destroy(streams[c]);
  for (int c = maxc - 1; c >= 0; c--) weft_comm_destroy(comms[c]);
  free(buf);
  return wrong != 0;
}

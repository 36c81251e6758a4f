/* membw_floor.c: the memory-bandwidth floor of a 2-rank all-reduce on this machine.
 *
 * Two threads in one address space do only the work any 2-rank all-reduce of S bytes must do,
 * with no communication protocol at all: thread t owns half h_t of the buffer and computes
 * out_t[h_t] = in_0[h_t] + in_1[h_t] (float32 sum), then copies out_t[h_t] to out_{1-t}[h_t].
 * Per rank that is reading 2 x S/2 and writing S/2 for the reduce, reading S/2 and writing S/2
 * for the copy. A barrier separates iterations. The best a real all-reduce over shared memory
 * can do is match it; `make bench` prints weft's busbw as a fraction of this floor.
 *
 * busbw is reported with the all-reduce factor 2(n-1)/n = 1 for n = 2, i.e. busbw = S / time,
 * GB/s = 1e9 B/s, so it compares one to one with all_reduce_perf's busbw column.
 *
 * Usage: membw_floor [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP]
 * Prints one JSON object per size: {"size": S, "time_us": t, "busbw": GB/s}. */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  float *in[2], *out[2];
  size_t count; /* elements per buffer */
  int iters;
  pthread_barrier_t *barrier;
  int id;
  double seconds; /* thread 0: time of the timed iterations */
} worker;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One all-reduce's worth of work for this thread's half. */
static void one_pass(const worker *w) {
  size_t half = w->count / 2;
  size_t lo = w->id == 0 ? 0 : half, hi = w->id == 0 ? half : w->count;
  float *mine = w->out[w->id], *theirs = w->out[1 - w->id];
  const float *a = w->in[0], *b = w->in[1];
  for (size_t i = lo; i < hi; i++) mine[i] = a[i] + b[i];
  memcpy(theirs + lo, mine + lo, (hi - lo) * sizeof(float));
}

static void *run(void *arg) {
  worker *w = arg;
  double t0 = 0;
  for (int i = 0; i < w->iters; i++) {
    pthread_barrier_wait(w->barrier);
    if (i == 0) t0 = now_s();
    one_pass(w);
  }
  pthread_barrier_wait(w->barrier);
  w->seconds = now_s() - t0;
  return NULL;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

/* Times iters passes at size bytes (after warmup passes); seconds per pass. */
static double measure(float **bufs, size_t bytes, int iters, int warmup) {
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, 2);
  worker w[2];
  for (int t = 0; t < 2; t++) {
    w[t] = (worker){{bufs[0], bufs[1]}, {bufs[2], bufs[3]}, bytes / sizeof(float), warmup, &barrier, t, 0};
  }
  pthread_t th;
  pthread_create(&th, NULL, run, &w[1]);
  run(&w[0]);
  pthread_join(th, NULL);
  w[0].iters = w[1].iters = iters;
  pthread_create(&th, NULL, run, &w[1]);
  run(&w[0]);
  pthread_join(th, NULL);
  pthread_barrier_destroy(&barrier);
  return w[0].seconds / iters;
}

int main(int argc, char **argv) {
  size_t minb = 16u << 20, maxb = 256u << 20;
  int factor = 2, iters = 10, warmup = 2, c;
  while ((c = getopt(argc, argv, "b:e:f:n:w:h")) != -1) {
    switch (c) {
      case 'b': minb = parse_size(optarg); break;
      case 'e': maxb = parse_size(optarg); break;
      case 'f': factor = atoi(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'w': warmup = atoi(optarg); break;
      default:
        fprintf(stderr, "usage: %s [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]\n", argv[0]);
        return c == 'h' ? 0 : 2;
    }
  }
  if (factor < 2 || iters < 1 || minb < 64 || maxb < minb) {
    fprintf(stderr, "%s: need -f >= 2, -n >= 1, 64 <= -b <= -e\n", argv[0]);
    return 2;
  }
  float *bufs[4];
  for (int i = 0; i < 4; i++) {
    bufs[i] = aligned_alloc(4096, (maxb + 4095) / 4096 * 4096);
    if (bufs[i] == NULL) {
      fprintf(stderr, "%s: cannot allocate 4 x %zu bytes\n", argv[0], maxb);
      return 1;
    }
    for (size_t k = 0; k < maxb / sizeof(float); k++) bufs[i][k] = (float)(k % 7);
  }
  for (size_t bytes = minb; bytes <= maxb; bytes *= (size_t)factor) {
    double t = measure(bufs, bytes, iters, warmup);
    printf("{\"size\": %zu, \"time_us\": %.2f, \"busbw\": %.3f}\n", bytes, t * 1e6, (double)bytes / t / 1e9);
  }
  for (int i = 0; i < 4; i++) free(bufs[i]);
  return 0;
}

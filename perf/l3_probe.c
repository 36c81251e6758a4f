/* l3_probe.c: do the two CPUs that the ranks run on share a last-level cache right now?
 *
 * Why: on the 2-core development VM the two vCPUs move between cores that share an L3 and
 * cores on two different L3s (two CCDs), on a scale of seconds to minutes, and nothing in
 * the guest says which. Shared-memory collectives move every byte from one core's cache to
 * the other's, so the placement decides their speed: 2-rank all-gather 64 MiB measured
 * 9-15 GB/s busbw for weft with a shared L3 and 3.4-4.0 GB/s for weft, Open MPI and
 * single copy alike with split L3s. A benchmark that does not know the placement of each
 * launch compares noise. make compare runs this before and after every sweep and reports
 * medians per placement (perf/compare/report.py).
 *
 * How: two threads pinned to two CPUs of the process's affinity mask (the first two, or
 * those given) bounce one cache line: thread A writes 2i+1, thread B waits for it and
 * writes 2i+2. A round trip costs two cache-line transfers between the cores: 50-100 ns
 * within one L3 and 300-370 ns across two on the VM. The median of -r repetitions of -n
 * round trips is printed, with the verdict "shared" below -t ns (default 180) and "split"
 * above. A waiting thread spins, and yields every 4096 polls, so a descheduled partner
 * (another busy process on the CPU) costs time, not a livelock; one repetition is -n round
 * trips, a few ms. With a single CPU the tool reports "single-cpu" and exits 0.
 *
 * Usage: l3_probe [-n ROUNDTRIPS] [-r REPEATS] [-t THRESHOLD_NS] [CPU_A CPU_B]
 * Prints one JSON line: {"cpus": [a, b], "round_trip_ns": x, "l3": "shared"|"split"}. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
  _Alignas(64) _Atomic long line; /* the bounced cache line */
  int cpu;
  long trips;
} probe_t;

static int pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* Waits until line holds want: spins, yielding the CPU every 4096 polls. */
static void wait_for(_Atomic long *line, long want) {
  for (unsigned polls = 1; atomic_load_explicit(line, memory_order_acquire) != want; polls++)
    if (polls % 4096 == 0) sched_yield();
}

static void *responder(void *arg) {
  probe_t *p = arg;
  if (pin(p->cpu) != 0) return (void *)1;
  for (long i = 0; i < p->trips; i++) {
    wait_for(&p->line, 2 * i + 1);
    atomic_store_explicit(&p->line, 2 * i + 2, memory_order_release);
  }
  return NULL;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* One repetition: trips round trips; returns ns per round trip, or -1 when pinning failed. */
static double one_run(int cpu_a, int cpu_b, long trips) {
  probe_t p = {.cpu = cpu_b, .trips = trips};
  atomic_init(&p.line, 0);
  pthread_t t;
  if (pin(cpu_a) != 0 || pthread_create(&t, NULL, responder, &p) != 0) return -1;
  double t0 = now_ns();
  for (long i = 0; i < trips; i++) {
    atomic_store_explicit(&p.line, 2 * i + 1, memory_order_release);
    wait_for(&p.line, 2 * i + 2);
  }
  double ns = (now_ns() - t0) / (double)trips;
  void *rc;
  pthread_join(t, &rc);
  return rc == NULL ? ns : -1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  long trips = 20000;
  int repeats = 5;
  double threshold = 180;
  int opt;
  while ((opt = getopt(argc, argv, "n:r:t:h")) != -1) {
    switch (opt) {
    case 'n': trips = atol(optarg); break;
    case 'r': repeats = atoi(optarg); break;
    case 't': threshold = atof(optarg); break;
    default:
      fprintf(stderr, "usage: %s [-n ROUNDTRIPS] [-r REPEATS] [-t THRESHOLD_NS] [CPU_A CPU_B]\n", "l3_probe");
      return 2;
    }
  }
  if (trips < 1 || repeats < 1 || repeats > 99) {
    fprintf(stderr, "l3_probe: -n must be >= 1 and -r between 1 and 99\n");
    return 2;
  }
  int cpus[2] = {-1, -1};
  if (argc - optind == 2) {
    cpus[0] = atoi(argv[optind]);
    cpus[1] = atoi(argv[optind + 1]);
  } else {
    cpu_set_t set;
    sched_getaffinity(0, sizeof(set), &set);
    for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; c++)
      if (CPU_ISSET(c, &set)) cpus[k++] = c;
  }
  if (cpus[0] == cpus[1]) {
    fprintf(stderr, "l3_probe: CPU_A and CPU_B must differ (both %d)\n", cpus[0]);
    return 2;
  }
  if (cpus[1] < 0) {
    printf("{\"cpus\": [%d], \"round_trip_ns\": null, \"l3\": \"single-cpu\"}\n", cpus[0]);
    return 0;
  }
  double ns[99];
  for (int i = 0; i < repeats; i++) {
    ns[i] = one_run(cpus[0], cpus[1], trips);
    if (ns[i] < 0) {
      fprintf(stderr, "l3_probe: cannot pin threads to CPUs %d and %d\n", cpus[0], cpus[1]);
      return 1;
    }
  }
  qsort(ns, (size_t)repeats, sizeof(double), cmp_double);
  double med = ns[repeats / 2];
  printf("{\"cpus\": [%d, %d], \"round_trip_ns\": %.1f, \"l3\": \"%s\"}\n", cpus[0], cpus[1], med,
         med < threshold ? "shared" : "split");
  return 0;
}

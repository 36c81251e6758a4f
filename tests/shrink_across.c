/* shrink_across.c: one rank of the multi-host shrink check (tests/multihost_shrink.sh), run
 * under a launcher's environment (weft_comm_init_from_env). Usage: shrink_across VICTIM.
 * Every rank runs all-reduces; VICTIM SIGKILLs itself at step 5 (with torchrun's variables
 * rank 0 hosts the bootstrap root, so VICTIM 0 takes the root with it). Each survivor then
 * shrinks with WEFT_SHRINK_FAILED and checks the new communicator: one rank fewer, its ranks
 * the old ones in order (all-gather), and an exact all-reduce. Prints
 * "rank R: shrink ok: N ranks, M ms" and exits 0, or says what was wrong and exits 1. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "weft.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: shrink_across VICTIM (under a launcher)\n");
    return 2;
  }
  int victim = atoi(argv[1]), rank = -1, n = 0;
  weft_comm_t comm, next = NULL;
  if (weft_comm_init_from_env(&comm, NULL) != WEFT_SUCCESS) {
    fprintf(stderr, "init: %s\n", weft_get_last_error(NULL));
    return 1;
  }
  weft_comm_user_rank(comm, &rank);
  weft_comm_count(comm, &n);
  weft_status_t st = WEFT_SUCCESS;
  for (int step = 0; st == WEFT_SUCCESS; step++) {
    if (rank == victim && step == 5) kill(getpid(), SIGKILL);
    double x = rank + 1;
    st = weft_all_reduce(&x, &x, 1, WEFT_FLOAT64, WEFT_SUM, comm, NULL);
    if (step > 10000) {
      fprintf(stderr, "rank %d: rank %d never died\n", rank, victim);
      return 1;
    }
  }
  double t0 = now_ms();
  st = weft_comm_shrink(comm, NULL, WEFT_SHRINK_FAILED, &next, NULL);
  if (st != WEFT_SUCCESS) {
    fprintf(stderr, "rank %d: shrink: %s: %s\n", rank, weft_get_error_string(st), weft_get_last_error(comm));
    return 1;
  }
  double ms = now_ms() - t0;
  int size = 0, bad = 0;
  weft_comm_count(next, &size);
  int32_t mine = rank, old[256];
  int64_t sum = rank + 1, want = 0;
  if (size != n - 1 || size > 256) bad = fprintf(stderr, "rank %d: new size %d, want %d\n", rank, size, n - 1);
  if (!bad && (weft_all_gather(&mine, old, 1, WEFT_INT32, next, NULL) != WEFT_SUCCESS ||
               weft_all_reduce(&sum, &sum, 1, WEFT_INT64, WEFT_SUM, next, NULL) != WEFT_SUCCESS))
    bad = fprintf(stderr, "rank %d: on the new communicator: %s\n", rank, weft_get_last_error(next));
  for (int i = 0, p = 0; !bad && i < size; i++, p++) {
    if (p == victim) p++;
    if (old[i] != p) bad = fprintf(stderr, "rank %d: new rank %d is old rank %d, want %d\n", rank, i, old[i], p);
    want += p + 1;
  }
  if (!bad && sum != want) bad = fprintf(stderr, "rank %d: all_reduce %lld, want %lld\n", rank, (long long)sum, (long long)want);
  if (!bad) printf("rank %d: shrink ok: %d ranks, %.1f ms\n", rank, size, ms);
  if (next) weft_comm_destroy(next);
  weft_comm_abort(comm);
  return bad ? 1 : 0;
}

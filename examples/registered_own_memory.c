/* registered_own_memory.c: the program's own buffer (malloc'd, as a tensor's storage or a
 * gradient bucket is) registered with weft_comm_register, as NCCL's ncclCommRegister: each
 * rank alone, no collective. Within a host, collectives on it then read and write the
 * peers' buffers directly. Prints the time of an in-place all-reduce (PyTorch's kind)
 * before and after registering: every rank must register, or none.
 *
 *   weftrun -n 2 ./registered_own_memory */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <weft.h>

#define CHECK(call)                                                                         \
  do {                                                                                      \
    weft_status_t st_ = (call);                                                             \
    if (st_ != WEFT_SUCCESS) {                                                              \
      fprintf(stderr, "registered_own_memory: %s\n", weft_get_last_error(NULL));            \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* The mean time of iters in-place all-reduces of buf, after one warm-up call. */
static weft_status_t time_all_reduce(float *buf, size_t count, weft_comm_t comm, int iters, double *us) {
  weft_status_t st = weft_all_reduce(buf, buf, count, WEFT_FLOAT32, WEFT_SUM, comm, NULL);
  double t0 = now_us();
  for (int i = 0; i < iters && st == WEFT_SUCCESS; i++)
    st = weft_all_reduce(buf, buf, count, WEFT_FLOAT32, WEFT_SUM, comm, NULL);
  *us = (now_us() - t0) / iters;
  return st;
}

int main(void) {
  weft_comm_t comm;
  CHECK(weft_comm_init_from_env(&comm, NULL));
  int rank, nranks;
  CHECK(weft_comm_user_rank(comm, &rank));
  CHECK(weft_comm_count(comm, &nranks));

  size_t count = 4 << 20; /* 16 MiB of float32 */
  float *buf = malloc(count * sizeof(float));
  if (buf == NULL) return 1;
  for (size_t i = 0; i < count; i++) buf[i] = 0;
  double plain_us, registered_us;
  CHECK(time_all_reduce(buf, count, comm, 10, &plain_us));

  weft_reg_t reg;
  CHECK(weft_comm_register(comm, buf, count * sizeof(float), &reg)); /* this rank alone */
  CHECK(time_all_reduce(buf, count, comm, 10, &registered_us));
  for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1);
  CHECK(weft_all_reduce(buf, buf, count, WEFT_FLOAT32, WEFT_SUM, comm, NULL));
  CHECK(weft_comm_deregister(comm, reg)); /* the call returned: no peer still touches buf */

  float want = (float)nranks * (float)(nranks + 1) / 2;
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += buf[i] != want;
  printf("rank %d of %d: 16 MiB in-place all_reduce %.0f us plain, %.0f us registered: %s\n", rank, nranks,
         plain_us, registered_us, wrong ? "WRONG" : "ok");
  free(buf);
  CHECK(weft_comm_destroy(comm));
  return wrong != 0;
}

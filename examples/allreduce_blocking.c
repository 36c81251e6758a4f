/* allreduce_blocking.c: the smallest weft program. Every rank fills a buffer with its rank
 * number, all-reduces it (sum, blocking: a NULL stream), and checks the result:
 * 0 + 1 + ... + (n-1) in every element.
 *
 *   weftrun -n 4 ./allreduce_blocking      (or mpirun -np 4, srun -n 4, torchrun's env)
 *
 * Build against an installed weft: cc allreduce_blocking.c $(pkg-config --cflags --libs weft) */
#include <stdio.h>
#include <stdlib.h>
#include <weft.h>

#define CHECK(call)                                                                         \
  do {                                                                                      \
    weft_status_t st_ = (call);                                                             \
    if (st_ != WEFT_SUCCESS) {                                                              \
      fprintf(stderr, "allreduce_blocking: %s\n", weft_get_last_error(NULL));               \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

int main(void) {
  weft_comm_t comm;
  CHECK(weft_comm_init_from_env(&comm, NULL)); /* rank and size from the launcher */
  int rank, nranks;
  CHECK(weft_comm_user_rank(comm, &rank));
  CHECK(weft_comm_count(comm, &nranks));

  size_t count = 1 << 20; /* elements */
  float *buf = malloc(count * sizeof(float));
  if (buf == NULL) return 1;
  for (size_t i = 0; i < count; i++) buf[i] = (float)rank;
  CHECK(weft_all_reduce(buf, buf, count, WEFT_FLOAT32, WEFT_SUM, comm, NULL)); /* in place */

  float want = (float)nranks * (float)(nranks - 1) / 2;
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += buf[i] != want;
  printf("rank %d of %d: all_reduce of %zu floats: %s (%g in every element)\n", rank, nranks, count,
         wrong ? "WRONG" : "ok", (double)want);
  free(buf);
  CHECK(weft_comm_destroy(comm));
  return wrong != 0;
}

/* point_to_point.c: weft_send / weft_recv around a ring, as a pipeline passes activations
 * from stage to stage. Each rank sends its block to rank+1 and receives from rank-1; both
 * calls sit in one group (weft_group_start/end), since every rank sends before it
 * receives and two blocking sends facing each other would wait forever.
 *
 *   weftrun -n 3 ./point_to_point */
#include <stdio.h>
#include <stdlib.h>
#include <weft.h>

#define CHECK(call)                                                                         \
  do {                                                                                      \
    weft_status_t st_ = (call);                                                             \
    if (st_ != WEFT_SUCCESS) {                                                              \
      fprintf(stderr, "point_to_point: %s\n", weft_get_last_error(NULL));                   \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

int main(void) {
  weft_comm_t comm;
  CHECK(weft_comm_init_from_env(&comm, NULL));
  int rank, nranks;
  CHECK(weft_comm_user_rank(comm, &rank));
  CHECK(weft_comm_count(comm, &nranks));
  int next = (rank + 1) % nranks, prev = (rank - 1 + nranks) % nranks;

  size_t count = 4096;
  int *out = malloc(count * sizeof(int)), *in = malloc(count * sizeof(int));
  if (out == NULL || in == NULL) return 1;
  for (size_t i = 0; i < count; i++) out[i] = rank * 100000 + (int)i;
  CHECK(weft_group_start());
  CHECK(weft_send(out, count, WEFT_INT32, next, comm, NULL));
  CHECK(weft_recv(in, count, WEFT_INT32, prev, comm, NULL));
  CHECK(weft_group_end()); /* both complete here */

  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += in[i] != prev * 100000 + (int)i;
  printf("rank %d of %d: sent %zu ints to rank %d, received rank %d's: %s\n", rank, nranks, count, next,
         prev, wrong ? "WRONG" : "ok");
  free(out);
  free(in);
  CHECK(weft_comm_destroy(comm));
  return wrong != 0;
}

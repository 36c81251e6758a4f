/* registered_buffers.c: buffers every rank registers as a window, so collectives within a
 * host read and write the peers' buffers directly (one pass over memory, no copy through
 * the shared-memory FIFO), as NCCL does with ncclMemAlloc + ncclCommWindowRegister.
 * weft_get_algorithm shows which algorithm the call takes ("direct" when it can).
 *
 *   weftrun -n 2 ./registered_buffers */
#include <stdio.h>
#include <string.h>
#include <weft.h>

#define CHECK(call)                                                                         \
  do {                                                                                      \
    weft_status_t st_ = (call);                                                             \
    if (st_ != WEFT_SUCCESS) {                                                              \
      fprintf(stderr, "registered_buffers: %s\n", weft_get_last_error(NULL));               \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

int main(void) {
  weft_comm_t comm;
  CHECK(weft_comm_init_from_env(&comm, NULL));
  int rank, nranks;
  CHECK(weft_comm_user_rank(comm, &rank));
  CHECK(weft_comm_count(comm, &nranks));

  size_t count = 1 << 20, bytes = 2 * count * sizeof(float); /* send half, receive half */
  float *buf;
  weft_window_t win;
  CHECK(weft_mem_alloc((void **)&buf, bytes));                /* memory peers can map */
  CHECK(weft_comm_window_register(comm, buf, bytes, &win, 0)); /* collective: every rank */
  for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1);
  const char *algo = "?";
  CHECK(weft_get_algorithm(comm, "all_reduce", count, WEFT_FLOAT32, &algo));
  CHECK(weft_all_reduce(buf, buf + count, count, WEFT_FLOAT32, WEFT_SUM, comm, NULL));

  float want = (float)nranks * (float)(nranks + 1) / 2;
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += buf[count + i] != want;
  printf("rank %d of %d: all_reduce on registered windows ran \"%s\": %s\n", rank, nranks, algo,
         wrong ? "WRONG" : "ok");
  CHECK(weft_comm_window_deregister(comm, win)); /* collective */
  CHECK(weft_mem_free(buf));
  CHECK(weft_comm_destroy(comm));
  return wrong != 0;
}

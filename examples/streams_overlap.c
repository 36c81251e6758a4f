/* streams_overlap.c: collectives on a stream, overlapped with computation, as a data-
 * parallel trainer overlaps gradient all-reduces with its backward pass. The bucket
 * all-reduces (WEFT_AVG, as DDP averages gradients) are enqueued on a weft stream and run
 * on its progress thread while this thread "computes" the next bucket; one
 * weft_stream_synchronize waits for all of them.
 *
 *   weftrun -n 2 ./streams_overlap */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <weft.h>

#define NBUCKETS 8
#define BUCKET (1 << 18) /* elements per bucket */

#define CHECK(call)                                                                         \
  do {                                                                                      \
    weft_status_t st_ = (call);                                                             \
    if (st_ != WEFT_SUCCESS) {                                                              \
      fprintf(stderr, "streams_overlap: %s\n", weft_get_last_error(NULL));                  \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Stands for the backward pass of one layer: writes the bucket's "gradients". */
static void compute_bucket(float *g, int bucket, int rank) {
  for (size_t i = 0; i < BUCKET; i++) g[i] = (float)(rank + bucket);
}

int main(void) {
  weft_comm_t comm;
  weft_stream_t stream;
  CHECK(weft_comm_init_from_env(&comm, NULL));
  CHECK(weft_stream_create(&stream));
  int rank, nranks;
  CHECK(weft_comm_user_rank(comm, &rank));
  CHECK(weft_comm_count(comm, &nranks));
  float *grads = malloc((size_t)NBUCKETS * BUCKET * sizeof(float));
  if (grads == NULL) return 1;

  double t0 = now_ms();
  for (int b = 0; b < NBUCKETS; b++) {
    float *g = grads + (size_t)b * BUCKET;
    compute_bucket(g, b, rank);                                               /* this thread */
    CHECK(weft_all_reduce(g, g, BUCKET, WEFT_FLOAT32, WEFT_AVG, comm, stream)); /* returns at once */
  }
  CHECK(weft_stream_synchronize(stream)); /* every bucket reduced */
  double ms = now_ms() - t0;

  size_t wrong = 0; /* the average of rank + b over the ranks: b + (n-1)/2 */
  for (int b = 0; b < NBUCKETS; b++)
    for (size_t i = 0; i < BUCKET; i++)
      wrong += grads[(size_t)b * BUCKET + i] != (float)b + (float)(nranks - 1) / 2;
  printf("rank %d of %d: %d buckets computed and averaged on a stream in %.1f ms: %s\n", rank, nranks,
         NBUCKETS, ms, wrong ? "WRONG" : "ok");
  free(grads);
  CHECK(weft_stream_destroy(stream));
  CHECK(weft_comm_destroy(comm));
  return wrong != 0;
}

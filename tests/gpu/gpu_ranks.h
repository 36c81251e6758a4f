/* gpu_ranks.h: what the GPU tests share: the probe for a usable CUDA device and the ranks as
 * forked processes sharing it. Header-only (static inline functions), CUDA runtime and POSIX only,
 * so a test written against nccl.h alone can use it too.
 *
 * CUDA is initialized only in children: a process that initialized CUDA cannot hand it to
 * the children it forks, so the probe runs in a child too, and the ranks are forked before
 * the parent touches CUDA. */
#ifndef WEFT_TESTS_GPU_RANKS_H
#define WEFT_TESTS_GPU_RANKS_H
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The tests' reports: FAIL(...) counts a failure in `fails` and prints the first 20 on
 * stderr, each naming the rank `me`; CK(call) FAILs a CUDA call that did not succeed and
 * returns from the (void) function. The including test defines `me` and `fails`. */
#define FAIL(...)                                   \
  do {                                              \
    if (fails++ < 20) {                             \
      fprintf(stderr, "# rank %d: ", me);           \
      fprintf(stderr, __VA_ARGS__);                 \
      fprintf(stderr, "\n");                        \
    }                                               \
  } while (0)
#define CK(call)                                                                \
  do {                                                                          \
    cudaError_t e_ = (call);                                                    \
    if (e_ != cudaSuccess) {                                                    \
      FAIL("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      return;                                                                   \
    }                                                                           \
  } while (0)

/* 1 when a child finds a CUDA device; else 0, with the reason in why[len]. */
static inline int gpu_ranks_device(char *why, size_t len) {
  int pfd[2];
  if (len > 0) why[0] = '\0';
  if (pipe(pfd) != 0) {
    snprintf(why, len, "pipe failed");
    return 0;
  }
  pid_t p = fork();
  if (p == 0) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    char msg[200];
    snprintf(msg, sizeof msg, "%s", e != cudaSuccess ? cudaGetErrorString(e) : count == 0 ? "no device" : "");
    if (write(pfd[1], msg, strlen(msg) + 1) < 0) _exit(1);
    _exit(e == cudaSuccess && count > 0 ? 0 : 3);
  }
  close(pfd[1]);
  ssize_t got = read(pfd[0], why, len > 0 ? len - 1 : 0);
  if (got >= 0 && (size_t)got < len) why[got] = '\0';
  close(pfd[0]);
  int status = 0;
  waitpid(p, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* The TAP plan of a test without a device: prints "1..0 # SKIP" with the reason and returns
 * 1; 0 (nothing printed) when a device is there. */
static inline int gpu_ranks_skip(void) {
  char why[200];
  if (gpu_ranks_device(why, sizeof why)) return 0;
  printf("1..0 # SKIP no CUDA device (%s)\n", why);
  return 1;
}

/* Forks n ranks (at most 16), rank r running rank_main(r, n, id, what) (id: the job's
 * unique id, of whichever API) and exiting with what it returns; 0 when every rank exits 0,
 * else 1 (a rank killed by a signal is named). */
static inline int gpu_ranks_run(int n, int (*rank_main)(int rank, int n, const void *id, int what),
                                const void *id, int what) {
  pid_t pids[16];
  if (n < 1 || n > 16) return 1;
  for (int r = 0; r < n; r++) {
    fflush(NULL);
    pids[r] = fork();
    if (pids[r] == 0) _exit(rank_main(r, n, id, what));
  }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      bad = 1;
      if (WIFSIGNALED(status)) fprintf(stderr, "# rank %d killed by signal %d\n", r, WTERMSIG(status));
    }
  }
  return bad;
}
#endif

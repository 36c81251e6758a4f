/* cuda_wait_probe.c: what CUDA does while one stream of a process sits in a stream wait
 * (cuStreamWaitValue32 on pinned host memory, as lib/stream_cuda.c makes the caller's
 * stream wait for a call's ticket). Not a pass/fail test: it prints one line per question,
 * for the GPU machine's run (tests/gpu/gpu_check.sh), so that the design of the CUDA IPC
 * path rests on measurements.
 *
 * The CUDA IPC path hung on an H200 with both ranks' progress threads inside CUDA while
 * their callers' streams waited. Two suspects: (1) cudaIpcOpenMemHandle (or another call
 * the progress thread makes) synchronizes the device, so it waits for the caller's stream,
 * which waits for that same thread; (2) while one stream of a process is in a stream wait,
 * work on the process's other streams does not run. Each question below starts a stream
 * wait on stream A, does one thing, and times it; a watchdog thread releases A after
 * RELEASE_MS. An operation that takes about RELEASE_MS (or more) waited for A: in weft it
 * would wait forever, since only the finished call releases A.
 *
 *   same process:  a copy and a memset on a second non-blocking stream B; cudaEventQuery
 *                  on B's event; cudaIpcGetMemHandle; cudaMalloc; cudaFree; cudaHostAlloc;
 *                  cudaFreeHost; cudaStreamSynchronize(B) with nothing on B; creating a
 *                  stream and an event; the first launch of a kernel (lazy loading: the
 *                  answer to the hang, seen in cuda-gdb on 2026-11-29), cudaFuncGetAttributes
 *                  of a kernel not loaded and of loaded ones, a loaded kernel's launch;
 *   two processes: cudaIpcOpenMemHandle of the peer's allocation; a copy on B reading the
 *                  peer's memory; the same copy while the PEER's stream waits (and ours
 *                  does not); cudaIpcCloseMemHandle.
 * Every process has an alarm: nothing here can hang the machine's run. Without a device it
 * prints "1..0 # SKIP". */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tests/gpu/gpu_ranks.h"

/* tests/gpu/order_kernels.cu */
int test_slow_fill(float *buf, size_t count, float value, long long spin, void *stream);
int test_copy_out(float *dst, const float *src, size_t count, void *stream);
int test_order_kernels_load(void);

#define RELEASE_MS 1500
#define BYTES ((size_t)64 << 20)

typedef CUresult (*pfn_wait32)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
static pfn_wait32 wait32;
static volatile uint32_t *word; /* pinned, mapped */
static CUdeviceptr word_dev;
static cudaStream_t A, B;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

#define MUST(call)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      printf("# %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      fflush(stdout);                                                                 \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

/* ---- the watchdog: releases stream A's wait RELEASE_MS after arm() ---------------------- */

static uint32_t target;
static double armed_at;
static void *releaser(void *arg) {
  (void)arg;
  uint32_t v = target;
  while (now_ms() - armed_at < RELEASE_MS) usleep(1000);
  __atomic_store_n(word, v, __ATOMIC_RELEASE);
  return NULL;
}

/* Puts a wait for the next value on A and starts the thread that will write it. */
static pthread_t arm(void) {
  target = *word + 1;
  if (wait32((CUstream)A, word_dev, target, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) {
    printf("# cuStreamWaitValue32 failed\n");
    exit(1);
  }
  cudaEvent_t e;
  MUST(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  MUST(cudaEventRecord(e, A));
  usleep(20000); /* A is in its wait by now */
  if (cudaEventQuery(e) != cudaErrorNotReady) printf("# note: stream A's wait did not hold\n");
  cudaGetLastError();
  cudaEventDestroy(e);
  armed_at = now_ms();
  pthread_t th;
  pthread_create(&th, NULL, releaser, NULL);
  return th;
}

static void report(const char *what, double t0, double t1) {
  double ms = t1 - t0;
  printf("# %-66s %9.2f ms  %s\n", what, ms,
         ms >= RELEASE_MS * 0.8 ? "WAITED for the other stream's wait (would deadlock in weft)" : "independent");
  fflush(stdout);
}

static void finish(pthread_t th) {
  pthread_join(th, NULL);
  MUST(cudaStreamSynchronize(A));
}

static void setup(void) {
  MUST(cudaSetDevice(0));
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q;
  MUST(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &q));
  wait32 = (pfn_wait32)fn;
  MUST(cudaHostAlloc((void **)&word, 64, cudaHostAllocMapped | cudaHostAllocPortable));
  *word = 0;
  MUST(cudaHostGetDevicePointer((void **)&word_dev, (void *)word, 0));
  MUST(cudaStreamCreateWithFlags(&A, cudaStreamNonBlocking));
  MUST(cudaStreamCreateWithFlags(&B, cudaStreamNonBlocking));
}

/* ---- one process ---------------------------------------------------------------------------- */

/* ASK(what, statements): the statements timed while stream A waits (arm), reported as what */
#define ASK(what, ...)          \
  do {                          \
    pthread_t th_ = arm();      \
    double t0_ = now_ms();      \
    __VA_ARGS__;                \
    report(what, t0_, now_ms()); \
    finish(th_);                \
  } while (0)

static void same_process(void) {
  char *x, *y, *h;
  MUST(cudaMalloc((void **)&x, BYTES));
  MUST(cudaMalloc((void **)&y, BYTES));
  MUST(cudaMemset(x, 1, BYTES));
  MUST(cudaDeviceSynchronize());
  cudaEvent_t eb;
  MUST(cudaEventCreateWithFlags(&eb, cudaEventDisableTiming));

  ASK("same process: 64 MiB D2D copy on stream B, then its event",
      MUST(cudaMemcpyAsync(y, x, BYTES, cudaMemcpyDeviceToDevice, B)); MUST(cudaEventRecord(eb, B));
      MUST(cudaEventSynchronize(eb)));
  ASK("same process: memset on B, polled with cudaEventQuery", MUST(cudaMemsetAsync(y, 2, BYTES, B));
      while (cudaEventQuery(eb) == cudaErrorNotReady) usleep(100); MUST(cudaEventRecord(eb, B));
      while (cudaEventQuery(eb) == cudaErrorNotReady) usleep(100));
  ASK("same process: cudaStreamSynchronize(B), B empty", MUST(cudaStreamSynchronize(B)));
  cudaIpcMemHandle_t ipc;
  ASK("same process: cudaIpcGetMemHandle", MUST(cudaIpcGetMemHandle(&ipc, x)));
  char *z;
  ASK("same process: cudaMalloc 1 MiB", MUST(cudaMalloc((void **)&z, 1 << 20)));
  ASK("same process: cudaFree", MUST(cudaFree(z)));
  ASK("same process: cudaHostAlloc 1 MiB", MUST(cudaHostAlloc((void **)&h, 1 << 20, cudaHostAllocPortable)));
  ASK("same process: cudaFreeHost", MUST(cudaFreeHost(h)));
  cudaStream_t c;
  ASK("same process: cudaStreamCreateWithFlags", MUST(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking)));
  cudaEvent_t ec;
  ASK("same process: cudaEventCreateWithFlags", MUST(cudaEventCreateWithFlags(&ec, cudaEventDisableTiming)));
  /* lazy loading (CUDA_MODULE_LOADING=LAZY, the default): the first launch of a kernel
   * loads it; so does cudaFuncGetAttributes; a loaded kernel's launch should not wait */
  ASK("same process: first launch of a kernel (lazy load)", MUST((cudaError_t)test_slow_fill(NULL, 0, 0.0f, 0, c)));
  ASK("same process: cudaFuncGetAttributes of a kernel not loaded", MUST((cudaError_t)test_order_kernels_load()));
  ASK("same process: launch of a loaded kernel, its stream synchronized",
      MUST((cudaError_t)test_copy_out(NULL, NULL, 0, c)); MUST(cudaStreamSynchronize(c)));
  ASK("same process: cudaFuncGetAttributes of loaded kernels", MUST((cudaError_t)test_order_kernels_load()));

  cudaEventDestroy(ec);
  cudaStreamDestroy(c);
  cudaEventDestroy(eb);
  cudaFree(x);
  cudaFree(y);
}

/* ---- two processes -------------------------------------------------------------------------- */

/* The peer: allocates, sends its handle, then on each command byte: 'w' puts its own stream
 * A in a wait released after RELEASE_MS, 'q' quits. */
static void peer(int rd, int wr) {
  alarm(60);
  setup();
  char *x;
  MUST(cudaMalloc((void **)&x, BYTES));
  MUST(cudaMemset(x, 3, BYTES));
  MUST(cudaDeviceSynchronize());
  cudaIpcMemHandle_t ipc;
  MUST(cudaIpcGetMemHandle(&ipc, x));
  if (write(wr, &ipc, sizeof ipc) != (ssize_t)sizeof ipc) exit(1);
  char c;
  while (read(rd, &c, 1) == 1 && c != 'q') {
    if (c == 'w') {
      pthread_t th = arm();
      if (write(wr, "k", 1) != 1) exit(1);
      finish(th);
    }
  }
  exit(0);
}

static void two_processes(pid_t pid, int rd, int wr) {
  cudaIpcMemHandle_t ipc;
  if (read(rd, &ipc, sizeof ipc) != (ssize_t)sizeof ipc) {
    printf("# the peer process sent no handle\n");
    return;
  }
  char *y, *peer_x = NULL;
  MUST(cudaMalloc((void **)&y, BYTES));
  MUST(cudaDeviceSynchronize());
  cudaEvent_t eb;
  MUST(cudaEventCreateWithFlags(&eb, cudaEventDisableTiming));
  double t0;

  pthread_t th = arm();
  t0 = now_ms();
  MUST(cudaIpcOpenMemHandle((void **)&peer_x, ipc, cudaIpcMemLazyEnablePeerAccess));
  report("two processes: cudaIpcOpenMemHandle of the peer's allocation", t0, now_ms());
  finish(th);

  th = arm();
  t0 = now_ms();
  MUST(cudaMemcpyAsync(y, peer_x, BYTES, cudaMemcpyDeviceToDevice, B));
  MUST(cudaEventRecord(eb, B));
  MUST(cudaEventSynchronize(eb));
  report("two processes: 64 MiB copy on B from the peer's memory", t0, now_ms());
  finish(th);

  char c = 'w';
  if (write(wr, &c, 1) != 1 || read(rd, &c, 1) != 1) return;
  t0 = now_ms();
  MUST(cudaMemcpyAsync(y, peer_x, BYTES, cudaMemcpyDeviceToDevice, B));
  MUST(cudaEventRecord(eb, B));
  MUST(cudaEventSynchronize(eb));
  report("two processes: that copy while the PEER's stream waits", t0, now_ms());
  usleep((RELEASE_MS + 200) * 1000);

  unsigned char hb[16];
  MUST(cudaMemcpy(hb, y, sizeof hb, cudaMemcpyDeviceToHost));
  printf("# the copy read the peer's bytes: %s\n", hb[0] == 3 && hb[15] == 3 ? "yes" : "NO");

  th = arm();
  t0 = now_ms();
  MUST(cudaIpcCloseMemHandle(peer_x));
  report("two processes: cudaIpcCloseMemHandle", t0, now_ms());
  finish(th);
  c = 'q';
  if (write(wr, &c, 1) != 1) return;
  int status;
  waitpid(pid, &status, 0);
}

int main(void) {
  /* The device check and the peer are children: a process that initialized CUDA cannot
   * give it to a child it forks. */
  if (gpu_ranks_skip()) return 0;
  int to_peer[2], from_peer[2];
  if (pipe(to_peer) || pipe(from_peer)) return 1;
  pid_t pid = fork();
  if (pid == 0) {
    close(to_peer[1]);
    close(from_peer[0]);
    peer(to_peer[0], from_peer[1]);
  }
  close(to_peer[0]);
  close(from_peer[1]);
  alarm(90);
  setup();
  printf("1..1\n# each line: how long one operation took while another stream of the process waited\n"
         "# (cuStreamWaitValue32, released by a thread after %d ms)\n", RELEASE_MS);
  same_process();
  two_processes(pid, from_peer[0], to_peer[1]);
  printf("ok 1 - the probe ran (its lines are measurements, not checks; a CUDA error fails it)\n");
  return 0;
}

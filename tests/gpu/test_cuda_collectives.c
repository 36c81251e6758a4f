/* test_cuda_collectives.c: weft on device buffers, ranks as real processes sharing one GPU
 * (TAP). Without a CUDA device it prints "1..0 # SKIP" with the reason.
 *
 * For 2, 3 and 4 ranks (or those given as arguments), every rank:
 *   sweep   runs all_reduce, reduce_scatter, reduce, all_gather, broadcast, all_to_all,
 *           gather, scatter and a ring of send/recv in a group, every datatype, every op of
 *           the reductions, in place and out of place, counts 1, 7, 4097 and a large one
 *           (2^18 + 3), on a weft stream bound to a CUDA stream; every result is
 *           compared bitwise with the host kernels' fold of every rank's input, output
 *           buffers are poisoned first, and a reduce's non-root output must stay untouched;
 *   order   queues, with no host synchronization between them, a kernel that writes the
 *           input only after spinning ~1 ms, the all-reduce, and a kernel that copies the
 *           output away, five times over with different values, small and large; then
 *           checks every copy (a collective that did not wait for the kernel, or a copy that
 *           did not wait for the collective, gives the wrong value);
 *   blocking a call on device buffers with a NULL stream (then, with --windows, an all-reduce
 *           whose buffers sit at another offset of the windows on each rank).
 * With --windows first, the test's device buffers are registered windows
 * (weft_comm_window_register); with WEFT_CUDA_DIRECT set, calls from 4 KiB on then run
 * direct, every rank reading and writing its peers' device buffers through CUDA IPC
 * (lib/stream_cuda.c), and each call checks that it ran the path it should (staged below
 * that size, for reduce, gather, scatter and send/recv, and without WEFT_CUDA_DIRECT).
 * With --bench [N] it instead times, on N ranks (2 by default), all-reduce, all-gather,
 * reduce-scatter and broadcast of float32 from 8 B to 128 MiB (WEFT_GPU_BENCH_MAX_BYTES
 * lowers the top) with CUDA events after warm-up (median of 11) and prints nccl-tests'
 * columns (algbw, busbw in GB/s = 1e9 B/s). With 1 rank it times weft's own path of a call
 * on device buffers (staging copies, events, the stream wait, the progress thread); with
 * more, the ranks' processes also share the GPU, whose contexts take turns on it (on the
 * H200 a small call took 26.6-27.6 us with 1 rank, 276-340 us with 2). */
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "weft.h"
#include "weft_cuda.h"
#include "tests/gpu/gpu_ranks.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "mem/kernels.h"

int test_slow_fill(float *buf, size_t count, float value, long long spin, void *stream);
int test_order_kernels_load(void);
int test_copy_out(float *dst, const float *src, size_t count, void *stream);

static int me, nr, fails;
static int use_windows; /* --windows: the test's device buffers are registered windows */
static char phase[200] = "start";
static size_t pool_bytes;
static char *pool_hs, *pool_hr, *pool_want, *pool_ds, *pool_dr;

/* A rank stuck longer than its alarm says where, and exits. */
static void stuck(int sig) {
  char msg[300];
  int n = snprintf(msg, sizeof msg, "# rank %d: stuck in: %s\n", me, phase);
  if (write(2, msg, (size_t)n) < 0) _exit(9);
  _exit(9);
}
static weft_comm_t comm;
static cudaStream_t cs;
static weft_stream_t ws;


/* ---- values ---------------------------------------------------------------------------- */

static void store(weft_datatype_t dt, void *p, size_t i, long v) {
  switch (dt) {
    case WEFT_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case WEFT_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case WEFT_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case WEFT_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case WEFT_INT64: ((int64_t *)p)[i] = v; break;
    case WEFT_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case WEFT_FLOAT16: ((uint16_t *)p)[i] = weft__float_to_half((float)v); break;
    case WEFT_BFLOAT16: ((uint16_t *)p)[i] = weft__float_to_bf16((float)v); break;
    case WEFT_FLOAT32: ((float *)p)[i] = (float)v; break;
    case WEFT_FLOAT64: ((double *)p)[i] = (double)v; break;
    default: break;
  }
}
/* A reduction input: 1..3, so sums, products and averages of 4 ranks are exact everywhere. */
static long red_value(int r, size_t i) { return 1 + (long)((r + i) % 3); }
/* A moved value: says where it came from. */
static long move_value(int r, size_t i) { return 1 + (long)((r * 31 + i) % 97); }

static void fill_host(void *h, weft_datatype_t dt, size_t n, int r, size_t base, int red) {
  for (size_t i = 0; i < n; i++) store(dt, h, i, red ? red_value(r, base + i) : move_value(r, base + i));
}

/* The fold of every rank's reduction input, elements [base, base + n). */
static void expect_reduced(void *out, weft_datatype_t dt, weft_redop_t op, size_t n, size_t base) {
  size_t es = weft__dtype_size(dt);
  void *in = malloc(n * es + 1);
  fill_host(out, dt, n, 0, base, 1);
  for (int r = 1; r < nr; r++) {
    fill_host(in, dt, n, r, base, 1);
    weft__reduce(out, out, in, n, dt, op);
  }
  if (op == WEFT_AVG) weft__avg_finalize(out, n, dt, nr);
  free(in);
}

/* ---- one checked call ------------------------------------------------------------------------ */

enum { AR, RS, RED, AG, BC, A2A, GA, SC, P2P, NCOLL };
static const char *const names[NCOLL] = {"all_reduce", "reduce_scatter", "reduce", "all_gather", "broadcast",
                                         "all_to_all", "gather", "scatter", "send/recv ring"};

static void compare(const char *what, const void *got, const void *want, size_t n, size_t es) {
  for (size_t i = 0; i < n; i++)
    if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) != 0) {
      FAIL("%s: element %zu of %zu differs", what, i, n);
      return;
    }
}

/* Whether a call runs direct on the device buffers (lib/stream_cuda.c runs_direct): turned
 * on (WEFT_CUDA_DIRECT), in windows, a collective with a direct row, 2-8 ranks, its larger
 * buffer at least the windows' minimum (WEFT_DIRECT_MIN_BYTES; 16 times that with more
 * ranks than cores). */
static int expect_direct(int coll, size_t block_bytes, int inplace) {
  size_t bytes = block_bytes, min = comm->oversubscribed ? comm->direct_min_bytes * 16 : comm->direct_min_bytes;
  const char *mode = getenv("WEFT_CUDA_DIRECT");
  if (!use_windows || mode == NULL || atoi(mode) == 0 || nr < 2 || nr > 8) return 0;
  switch (coll) {
    case AR: break;
    case BC: if (atoi(mode) == 2) return 0; /* stays staged on the caller's stream */
      break;
    case A2A: if (inplace) return 0; /* fall through */
    case AG: case RS: bytes *= (size_t)nr; break;
    default: return 0;
  }
  return bytes > 0 && bytes >= min;
}

static void one_call(int coll, weft_datatype_t dt, weft_redop_t op, size_t c, int inplace) {
  size_t es = weft__dtype_size(dt), n = (size_t)nr;
  int root = (int)(c % n);
  /* sizes in elements of the send and receive buffers on this rank */
  size_t sn = c, rn = c;
  switch (coll) {
    case RS: sn = c * n; break;
    case AG: rn = c * n; break;
    case A2A: sn = rn = c * n; break;
    case GA: rn = c * n; break;
    case SC: sn = c * n; break;
    default: break;
  }
  char what[160];
  snprintf(what, sizeof what, "%s %s op %d count %zu %s", names[coll], weft__dtype_name(dt), (int)op, c,
           inplace ? "in place" : "out of place");
  size_t big = (sn > rn ? sn : rn) * es;
  if (big + 64 > pool_bytes) {
    FAIL("%s: %zu bytes exceed the test's buffers", what, big);
    return;
  }
  char *hs = pool_hs, *hr = pool_hr, *want = pool_want;
  char *ds = pool_ds, *dr = pool_dr;
  snprintf(phase, sizeof phase, "%s", what);
  CK(cudaMemset(dr, 0xAB, big + 64));
  CK(cudaMemset(ds, 0xCD, big + 64));
  int red = coll == AR || coll == RS || coll == RED;
  /* the send data: where it lives depends on in-place */
  char *send = ds, *recv = dr;
  if (inplace) {
    switch (coll) {
      case AR: case RED: case BC: case A2A: send = dr; break;
      case RS: send = dr; recv = dr + (size_t)me * c * es; break;
      case AG: send = dr + (size_t)me * c * es; break;
      case GA: if (me == root) send = dr + (size_t)root * c * es; break;
      case SC: if (me == root) { send = ds; recv = ds + (size_t)root * c * es; } break;
      default: break;
    }
  }
  fill_host(hs, dt, sn, me, 0, red);
  CK(cudaMemcpy(send, hs, sn * es, cudaMemcpyHostToDevice));
  /* cudaMemset and a pageable cudaMemcpy may still run on the legacy stream when they
   * return, and cs does not synchronize with it (non-blocking): wait for them here. */
  CK(cudaDeviceSynchronize());
  uint64_t direct_before = comm->direct_calls;
  weft_status_t st = WEFT_SUCCESS;
  switch (coll) {
    case AR: st = weft_all_reduce(send, recv, c, dt, op, comm, ws); break;
    case RS: st = weft_reduce_scatter(send, recv, c, dt, op, comm, ws); break;
    case RED: st = weft_reduce(send, recv, c, dt, op, root, comm, ws); break;
    case AG: st = weft_all_gather(send, recv, c, dt, comm, ws); break;
    case BC: st = weft_broadcast(send, recv, c, dt, root, comm, ws); break;
    case A2A: st = weft_all_to_all(send, recv, c, dt, comm, ws); break;
    case GA: st = weft_gather(send, recv, c, dt, root, comm, ws); break;
    case SC: st = weft_scatter(send, recv, c, dt, root, comm, ws); break;
    case P2P:
      weft_group_start();
      weft_send(send, c, dt, (me + 1) % nr, comm, ws);
      weft_recv(recv, c, dt, (me + nr - 1) % nr, comm, ws);
      st = weft_group_end();
      break;
  }
  if (st != WEFT_SUCCESS) FAIL("%s: returned %d: %s", what, (int)st, weft_get_last_error(comm));
  CK(cudaStreamSynchronize(cs));
  st = weft_stream_synchronize(ws);
  if (st != WEFT_SUCCESS) FAIL("%s: stream: %d: %s", what, (int)st, weft_get_last_error(comm));
  int direct = expect_direct(coll, c * es, inplace);
  if ((comm->direct_calls != direct_before) != direct)
    FAIL("%s: ran %s, expected %s", what, comm->direct_calls != direct_before ? "direct" : "staged",
         direct ? "direct (buffers in device windows)" : "staged");
  /* what this rank's receive buffer must hold */
  size_t check = rn;
  int untouched = 0;
  switch (coll) {
    case AR: expect_reduced(want, dt, op, c, 0); break;
    case RS: expect_reduced(want, dt, op, c, (size_t)me * c); break;
    case RED: if (me == root) expect_reduced(want, dt, op, c, 0); else untouched = 1; break;
    case AG: for (int r = 0; r < nr; r++) fill_host(want + (size_t)r * c * es, dt, c, r, 0, 0); break;
    case BC: fill_host(want, dt, c, root, 0, 0); break;
    case A2A: for (int r = 0; r < nr; r++) fill_host(want + (size_t)r * c * es, dt, c, r, (size_t)me * c, 0); break;
    case GA:
      if (me == root) for (int r = 0; r < nr; r++) fill_host(want + (size_t)r * c * es, dt, c, r, 0, 0);
      else check = 0;
      break;
    case SC: fill_host(want, dt, c, root, (size_t)me * c, 0); break;
    case P2P: fill_host(want, dt, c, (me + nr - 1) % nr, 0, 0); break;
  }
  if (untouched && !inplace) {
    CK(cudaMemcpy(hr, dr, c * es, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < c * es; i++)
      if ((unsigned char)hr[i] != 0xAB) {
        FAIL("%s: a non-root's receive buffer was written (byte %zu)", what, i);
        break;
      }
  } else if (check > 0 && !untouched) {
    CK(cudaMemcpy(hr, recv, check * es, cudaMemcpyDeviceToHost));
    compare(what, hr, want, check, es);
  }
}

static int pools(size_t bytes) {
  pool_bytes = bytes;
  pool_hs = malloc(bytes);
  pool_hr = malloc(bytes);
  pool_want = malloc(bytes);
  if (pool_hs == NULL || pool_hr == NULL || pool_want == NULL) return 0;
  return cudaMalloc((void **)&pool_ds, bytes) == cudaSuccess && cudaMalloc((void **)&pool_dr, bytes) == cudaSuccess;
}

static void sweep(size_t lo_count, size_t big) {
  static const weft_datatype_t dts[] = {WEFT_INT8, WEFT_UINT8, WEFT_INT32, WEFT_UINT32, WEFT_INT64,
                                        WEFT_UINT64, WEFT_FLOAT16, WEFT_BFLOAT16, WEFT_FLOAT32, WEFT_FLOAT64};
  size_t counts[] = {1, 7, 4097, big};
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
      if (me == 0 && counts[k] >= lo_count && counts[k] <= big) {
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        fprintf(stderr, "# rank 0: %.1f s: count %zu %s, %d failures so far\n",
                (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), counts[k],
                weft__dtype_name(dts[d]), fails);
      }
      for (int coll = 0; coll < NCOLL; coll++)
        for (int inplace = 0; inplace < 2; inplace++) {
          if (counts[k] < lo_count || counts[k] > big || fails >= 20) continue;
          if (coll == P2P && inplace) continue;
          int red = coll == AR || coll == RS || coll == RED;
          for (int op = 0; op < (red ? WEFT_NUM_OPS : 1); op++) one_call(coll, dts[d], (weft_redop_t)op, counts[k], inplace);
        }
    }
}

/* ---- stream order -------------------------------------------------------------------------------- */

static void order(size_t count) {
  enum { ROUNDS = 5 };
  float *in = NULL, *out = NULL, *res = NULL;
  if (use_windows) { /* the direct path: the buffers inside the registered pools */
    if (2 * count * sizeof(float) > pool_bytes) {
      FAIL("order: %zu floats exceed the windows", count);
      return;
    }
    in = (float *)pool_ds;
    out = (float *)pool_dr;
  } else {
    CK(cudaMalloc((void **)&in, count * sizeof(float)));
    CK(cudaMalloc((void **)&out, count * sizeof(float)));
  }
  uint64_t direct_before = comm->direct_calls;
  CK(cudaMalloc((void **)&res, ROUNDS * count * sizeof(float)));
  CK(cudaMemset(in, 0, count * sizeof(float)));
  CK(cudaDeviceSynchronize());
  for (int k = 0; k < ROUNDS; k++) {
    if (test_slow_fill(in, count, (float)(me + 1 + 10 * k), 2000000, cs) != 0) FAIL("slow_fill launch");
    weft_status_t st = weft_all_reduce(in, out, count, WEFT_FLOAT32, WEFT_SUM, comm, ws);
    if (st != WEFT_SUCCESS) FAIL("order: all_reduce returned %d", (int)st);
    if (test_copy_out(res + (size_t)k * count, out, count, cs) != 0) FAIL("copy_out launch");
  }
  CK(cudaStreamSynchronize(cs));
  if (weft_stream_synchronize(ws) != WEFT_SUCCESS) FAIL("order: stream: %s", weft_get_last_error(comm));
  if (comm->direct_calls - direct_before != (expect_direct(AR, count * sizeof(float), 0) ? ROUNDS : 0))
    FAIL("order: %llu of %d all-reduces ran direct", (unsigned long long)(comm->direct_calls - direct_before), ROUNDS);
  float *h = malloc(ROUNDS * count * sizeof(float));
  CK(cudaMemcpy(h, res, ROUNDS * count * sizeof(float), cudaMemcpyDeviceToHost));
  for (int k = 0; k < ROUNDS; k++) {
    float want = (float)(nr * (nr + 1) / 2 + 10 * k * nr);
    for (size_t i = 0; i < count; i++)
      if (h[(size_t)k * count + i] != want) {
        FAIL("order: count %zu round %d element %zu: got %g, expected %g", count, k, i, h[(size_t)k * count + i], want);
        break;
      }
  }
  free(h);
  if (!use_windows) {
    cudaFree(in);
    cudaFree(out);
  }
  cudaFree(res);
}

static void blocking(void) {
  size_t c = 1000;
  int32_t *d = NULL, h[1000];
  CK(cudaMalloc((void **)&d, c * sizeof *d));
  for (size_t i = 0; i < c; i++) h[i] = me + (int)i;
  CK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
  weft_status_t st = weft_all_reduce(d, d, c, WEFT_INT32, WEFT_SUM, comm, NULL);
  if (st != WEFT_SUCCESS) FAIL("blocking all_reduce: %d: %s", (int)st, weft_get_last_error(comm));
  CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < c; i++)
    if (h[i] != nr * (nr - 1) / 2 + nr * (int)i) {
      FAIL("blocking all_reduce: element %zu: %d", i, h[i]);
      break;
    }
  cudaFree(d);
}

/* Calls of count 0 on device buffers, on the stream and blocking: each succeeds and moves
 * nothing (nccl-tests' first all-gather failed with "no all_gather algorithm handles
 * buffers in cuda memory" before a call moving no bytes went to the host path). */
static void zero_count(void) {
  float *d = NULL;
  CK(cudaMalloc((void **)&d, 256));
  for (int blocking_call = 0; blocking_call < 2; blocking_call++) {
    weft_stream_t s = blocking_call ? NULL : ws;
    weft_status_t st[4] = {weft_all_reduce(d, d + 8, 0, WEFT_FLOAT32, WEFT_SUM, comm, s),
                           weft_all_gather(d, d + 8, 0, WEFT_FLOAT32, comm, s),
                           weft_reduce_scatter(d, d + 8, 0, WEFT_FLOAT32, WEFT_SUM, comm, s),
                           weft_broadcast(d, d + 8, 0, WEFT_FLOAT32, 0, comm, s)};
    for (int i = 0; i < 4; i++)
      if (st[i] != WEFT_SUCCESS)
        FAIL("count 0, %s, collective %d: %d: %s", blocking_call ? "blocking" : "on the stream", i, (int)st[i],
             weft_get_last_error(comm));
  }
  CK(cudaStreamSynchronize(cs));
  if (weft_stream_synchronize(ws) != WEFT_SUCCESS) FAIL("count 0: stream: %s", weft_get_last_error(comm));
  cudaFree(d);
}

/* Buffers at different offsets of the windows on different ranks (with --windows): the
 * stream thread's form of the direct path (WEFT_CUDA_DIRECT=1) and the staged path take
 * them, each rank saying where its buffers are; the caller's-stream form (2) queued its
 * kernels for the same offsets on every rank, so it must fail the call on every rank,
 * naming the difference, and its kernels must write nothing. Runs last: a failed call may
 * leave the communicator failed. */
static void asymmetric(void) {
  enum { COUNT = 4096 };
  size_t shift = (size_t)me * 256;
  const char *m = getenv("WEFT_CUDA_DIRECT");
  int mode = m != NULL ? atoi(m) : 0;
  float *in = (float *)(pool_ds + shift), *out = (float *)(pool_dr + shift), h[COUNT];
  for (int i = 0; i < COUNT; i++) h[i] = (float)(me + 1 + i % 7);
  CK(cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice));
  CK(cudaMemset(out, 0xAB, sizeof h));
  CK(cudaDeviceSynchronize());
  weft_status_t st = weft_all_reduce(in, out, COUNT, WEFT_FLOAT32, WEFT_SUM, comm, ws);
  CK(cudaStreamSynchronize(cs));
  if (st == WEFT_SUCCESS) st = weft_stream_synchronize(ws);
  CK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
  if (mode == 2) {
    const char *why = weft_get_last_error(comm);
    if (st == WEFT_SUCCESS) FAIL("asymmetric offsets, WEFT_CUDA_DIRECT=2: the call succeeded");
    else if (strstr(why, "offset") == NULL) FAIL("asymmetric offsets: the error does not say why: %s", why);
    unsigned char *b = (unsigned char *)h;
    for (size_t i = 0; i < sizeof h; i++)
      if (b[i] != 0xAB) {
        FAIL("asymmetric offsets, WEFT_CUDA_DIRECT=2: the failed call wrote its output (byte %zu)", i);
        break;
      }
    return;
  }
  if (st != WEFT_SUCCESS) FAIL("asymmetric offsets: %d: %s", (int)st, weft_get_last_error(comm));
  for (int i = 0; i < COUNT; i++)
    if (h[i] != (float)(nr * (nr + 1) / 2 + nr * (i % 7))) {
      FAIL("asymmetric offsets: element %d: %g", i, h[i]);
      break;
    }
}

/* ---- the benchmark ---------------------------------------------------------------------------------- */

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static void bench(void) {
  static const char *const bnames[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast"};
  size_t maxb = (size_t)256 << 20;
  char *s = NULL, *r = NULL;
  CK(cudaMalloc((void **)&s, maxb));
  CK(cudaMalloc((void **)&r, maxb));
  CK(cudaMemset(s, 1, maxb));
  CK(cudaDeviceSynchronize());
  weft_window_t wins[2] = {NULL, NULL};
  if (use_windows && (weft_comm_window_register(comm, s, maxb, &wins[0], 0) != WEFT_SUCCESS ||
                      weft_comm_window_register(comm, r, maxb, &wins[1], 0) != WEFT_SUCCESS)) {
    FAIL("bench: window register: %s", weft_get_last_error(comm));
    return;
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  /* WEFT_GPU_BENCH_MAX_BYTES: the largest size timed (a quick look at small calls) */
  const char *lim_env = getenv("WEFT_GPU_BENCH_MAX_BYTES");
  size_t lim = lim_env != NULL ? strtoull(lim_env, NULL, 10) : maxb;
  if (lim > maxb) lim = maxb;
  if (me == 0) printf("# %-14s %12s %10s %10s %10s\n", "collective", "size(B)", "time(us)", "algbw", "busbw");
  for (int b = 0; b < 4; b++)
    for (size_t bytes = 8; bytes <= lim; bytes *= (bytes < 65536 ? 128 : bytes < ((size_t)16 << 20) ? 16 : 4)) {
      size_t per = bytes / sizeof(float) / (b == 1 || b == 2 ? (size_t)nr : 1); /* nccl-tests' count */
      if (per == 0) continue;
      snprintf(phase, sizeof phase, "bench %s %zu bytes", bnames[b], bytes);
      /* Warm-up: one call per staging slot of the stream and one more (lib/stream_cuda.c:
       * NSLOTS = 16, the calls in flight rotate over them). A slot smaller than a call is
       * freed and re-allocated (cudaFreeHost + cudaHostAlloc of the call's bytes, in the
       * enqueue, between the two events), so with 3 warm-up calls every timed call of a
       * size larger than the last timed the pinning of its staging memory, not the call:
       * the first GPU run's all-reduce, the first collective of the bench, read 0.57 GB/s
       * at 128 MiB for that reason while all-gather read 3.8. */
      enum { ITERS = 11, WARMUP = 17 };
      float t[ITERS];
      for (int it = -WARMUP; it < ITERS; it++) {
        CK(cudaEventRecord(e0, cs));
        switch (b) {
          case 0: weft_all_reduce(s, r, per, WEFT_FLOAT32, WEFT_SUM, comm, ws); break;
          case 1: weft_all_gather(s, r, per, WEFT_FLOAT32, comm, ws); break;
          case 2: weft_reduce_scatter(s, r, per, WEFT_FLOAT32, WEFT_SUM, comm, ws); break;
          case 3: weft_broadcast(s, r, per, WEFT_FLOAT32, 0, comm, ws); break;
        }
        CK(cudaEventRecord(e1, cs));
        CK(cudaEventSynchronize(e1));
        if (it >= 0) CK(cudaEventElapsedTime(&t[it], e0, e1));
      }
      if (weft_stream_synchronize(ws) != WEFT_SUCCESS) FAIL("bench: %s", weft_get_last_error(comm));
      qsort(t, ITERS, sizeof t[0], cmp_float);
      double us = t[ITERS / 2] * 1e3, algbw = (double)bytes / (us * 1e3);
      double factor = b == 0 ? 2.0 * (nr - 1) / nr : b == 3 ? 1.0 : (double)(nr - 1) / nr;
      if (me == 0) printf("  %-14s %12zu %10.2f %10.2f %10.2f\n", bnames[b], bytes, us, algbw, algbw * factor);
    }
  fflush(stdout);
  for (int k = 0; k < 2; k++)
    if (wins[k] != NULL) weft_comm_window_deregister(comm, wins[k]);
  cudaFree(s);
  cudaFree(r);
}

/* ---- ranks ---------------------------------------------------------------------------------------- */

static int rank_main(int rank, int n, const void *idp, int what) {
  weft_unique_id_t id;
  memcpy(&id, idp, sizeof id);
  me = rank;
  nr = n;
  if (cudaSetDevice(0) != cudaSuccess) return 2;
  const char *lazy = getenv("WEFT_GPU_TEST_LAZY");
  if ((lazy == NULL || strcmp(lazy, "1") != 0) && test_order_kernels_load() != 0) {
    FAIL("loading the test's kernels");
    return 1;
  }
  weft_status_t st = weft_comm_init_rank(&comm, n, id, rank);
  if (st != WEFT_SUCCESS) {
    FAIL("init: %s", weft_get_last_error(NULL));
    return 1;
  }
  if (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess || weft_stream_create_cuda(&ws, cs) != WEFT_SUCCESS) {
    FAIL("stream: %s", weft_get_last_error(NULL));
    return 1;
  }
  const char *b = getenv("WEFT_GPU_TEST_BIG_ELEMENTS");
  size_t big = b != NULL ? strtoull(b, NULL, 10) : (size_t)(1 << 18) + 3;
  signal(SIGALRM, stuck);
  alarm(what == 2 ? 75 : what == 1 ? 35 : 55); /* below gpu_check.sh's timeouts: no orphaned rank */
  if (what != 2 && !pools(big * 8 * 8 + 4096)) {
    FAIL("cannot allocate the test's buffers");
    return 1;
  }
  weft_window_t wins[2] = {NULL, NULL};
  if (what != 2 && use_windows) {
    snprintf(phase, sizeof phase, "window register");
    if (weft_comm_window_register(comm, pool_ds, pool_bytes, &wins[0], 0) != WEFT_SUCCESS ||
        weft_comm_window_register(comm, pool_dr, pool_bytes, &wins[1], 0) != WEFT_SUCCESS) {
      FAIL("window register: %s", weft_get_last_error(comm));
      return 1;
    }
    if (comm->direct_windows != 2) FAIL("the device windows are not usable for direct collectives");
  }
  if (what == 0) sweep(1, 4097);     /* small calls */
  if (what == 3) sweep(big, big);    /* large calls: several pipeline chunks of the host algorithms */
  if (what == 1) {
    snprintf(phase, sizeof phase, "stream order, 4097 floats");
    order(4097);
    snprintf(phase, sizeof phase, "stream order, 4 Mi floats");
    order((size_t)1 << 22);
    snprintf(phase, sizeof phase, "blocking all_reduce");
    blocking();
    snprintf(phase, sizeof phase, "calls of count 0");
    zero_count();
    if (use_windows) {
      snprintf(phase, sizeof phase, "buffers at other offsets of the windows on each rank");
      asymmetric();
    }
  }
  if (what == 2) bench();
  snprintf(phase, sizeof phase, "destroy");
  for (int k = 0; k < 2; k++)
    if (wins[k] != NULL && weft_comm_window_deregister(comm, wins[k]) != WEFT_SUCCESS)
      FAIL("window deregister: %s", weft_get_last_error(comm));
  weft_stream_destroy(ws);
  cudaStreamDestroy(cs);
  weft_comm_destroy(comm);
  return fails > 0;
}

/* Forks n ranks running `what`; 0 when all exit 0. */
static int run(int n, int what) {
  weft_unique_id_t id;
  if (weft_get_unique_id(&id) != WEFT_SUCCESS) return -1;
  return gpu_ranks_run(n, rank_main, &id, what);
}

int main(int argc, char **argv) {
  if (gpu_ranks_skip()) return 0;
  if (argc > 1 && strcmp(argv[1], "--windows") == 0) { /* first: the options below as before */
    use_windows = 1;
    argv[1] = argv[0];
    argv++;
    argc--;
  }
  if (argc > 1 && strcmp(argv[1], "--bench") == 0) return run(argc > 2 ? atoi(argv[2]) : 2, 2) != 0;
  /* [--only small|large|order] [ranks ...] */
  int only = -1, a = 1;
  if (argc > 2 && strcmp(argv[1], "--only") == 0) {
    only = strcmp(argv[2], "small") == 0 ? 0 : strcmp(argv[2], "order") == 0 ? 1 : 3;
    a = 3;
  }
  int ranks[8], nrk = 0;
  for (int i = a; i < argc && nrk < 8; i++) ranks[nrk++] = atoi(argv[i]);
  if (nrk == 0) ranks[0] = 2, ranks[1] = 3, ranks[2] = 4, nrk = 3;
  static const int parts[3] = {1, 0, 3};
  static const char *const part_names[4] = {
      "sweep of small calls (counts 1, 7, 4097; every collective, datatype, op, in and out of place)",
      "stream order (kernel before, kernel after, no host wait), a blocking call and calls of count 0",
      "", "sweep of large calls (2^18 + 3 elements; every collective, datatype, op, in and out of place)"};
  printf("1..%d\n", (only < 0 ? 3 : 1) * nrk);
  int t = 0, failed = 0;
  for (int i = 0; i < nrk; i++)
    for (int k = 0; k < 3; k++) {
      if (only >= 0 && parts[k] != only) continue;
      int bad = run(ranks[i], parts[k]);
      printf("%sok %d - %d ranks sharing one GPU%s: %s\n", bad ? "not " : "", ++t, ranks[i],
             use_windows ? ", buffers in device windows" : "", part_names[parts[k]]);
      failed |= bad;
      fflush(stdout);
    }
  return failed;
}

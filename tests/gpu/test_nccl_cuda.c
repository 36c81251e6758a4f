/* test_nccl_cuda.c: libnccl.so.2 on device buffers and a CUDA stream, written against nccl.h
 * and the CUDA runtime only, ranks as processes sharing GPU 0 (TAP). Without a CUDA device it
 * prints "1..0 # SKIP" with the reason.
 *
 * For 2 and 3 ranks (or those given as arguments), every rank, on a non-blocking cudaStream_t:
 *   sweep   ncclAllReduce (sum and max on float, int32, half, bf16; prod, min, avg on float),
 *           ncclReduceScatter, ncclReduce, ncclAllGather, ncclBroadcast, ncclAlltoAll and a
 *           ring of ncclSend/ncclRecv in a group, in and out of place, counts 1, 7, 4097,
 *           buffers from cudaMalloc poisoned first; PreMulSum with a host and a device
 *           scalar; every result checked after cudaStreamSynchronize;
 *   order   queues, with no host synchronization between them, a kernel that writes the
 *           input only after spinning ~1 ms, ncclAllReduce, and a kernel (then a
 *           cudaMemcpyAsync) that reads the output, five times with different values; a
 *           blocking call (NULL stream); ncclMemAlloc's memory is device memory and works;
 *           ncclCommGetAsyncError says ncclSuccess; a bad datatype and a bad op fail with
 *           ncclInvalidArgument and a message naming them. */
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "nccl.h"
#include "tests/gpu/gpu_ranks.h"

/* tests/gpu/order_kernels.cu */
int test_slow_fill(float *buf, size_t count, float value, long long spin, void *stream);
int test_copy_out(float *dst, const float *src, size_t count, void *stream);

static int me, nr, fails;
static char phase[200] = "start";
static ncclComm_t comm;
static cudaStream_t cs;

static void stuck(int sig) {
  char msg[300];
  int n = snprintf(msg, sizeof msg, "# rank %d: stuck in: %s\n", me, phase);
  if (write(2, msg, (size_t)n) < 0) _exit(9);
  _exit(9);
}

#define NK(call)                                                                                       \
  do {                                                                                                 \
    ncclResult_t r_ = (call);                                                                          \
    if (r_ != ncclSuccess) {                                                                           \
      FAIL("%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call, ncclGetErrorString(r_), ncclGetLastError(comm)); \
      return;                                                                                          \
    }                                                                                                  \
  } while (0)

/* ---- values: small integers (and halves), exact in every datatype used ---------------------- */

static uint16_t to_half(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) == 0) return (uint16_t)(b >> 16);
  int e = (int)((b >> 23) & 0xff) - 127 + 15;
  return (uint16_t)(((b >> 16) & 0x8000u) | ((uint32_t)e << 10) | ((b >> 13) & 0x3ffu));
}
static float from_half(uint16_t h) {
  uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ffu, s = (uint32_t)(h & 0x8000u) << 16, b;
  if (e == 0 && m == 0) b = s;
  else if (e == 0x1f) b = s | 0x7f800000u | (m << 13);
  else if (e == 0) return (h & 0x8000u ? -1.f : 1.f) * (float)m / (1 << 24); /* subnormal */
  else b = s | ((e - 15 + 127) << 23) | (m << 13);
  float f;
  memcpy(&f, &b, 4);
  return f;
}
static uint16_t to_bf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return (uint16_t)(b >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

static size_t dsize(ncclDataType_t dt) {
  return dt == ncclHalf || dt == ncclBfloat16 ? 2 : dt == ncclDouble || dt == ncclInt64 ? 8 : 4;
}
static void put(ncclDataType_t dt, void *p, size_t i, double v) {
  switch (dt) {
    case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
    case ncclFloat32: ((float *)p)[i] = (float)v; break;
    case ncclHalf: ((uint16_t *)p)[i] = to_half((float)v); break;
    case ncclBfloat16: ((uint16_t *)p)[i] = to_bf16((float)v); break;
    default: break;
  }
}
static double get(ncclDataType_t dt, const void *p, size_t i) {
  switch (dt) {
    case ncclInt32: return ((const int32_t *)p)[i];
    case ncclFloat32: return ((const float *)p)[i];
    case ncclHalf: return from_half(((const uint16_t *)p)[i]);
    case ncclBfloat16: return from_bf16(((const uint16_t *)p)[i]);
    default: return 0;
  }
}
static double red_value(int r, size_t i) { return 1 + (double)((r + i) % 3); }
static double move_value(int r, size_t i) { return 1 + (double)((r * 31 + i) % 97); }
static double fold(ncclRedOp_t op, size_t i) {
  double acc = red_value(0, i);
  for (int r = 1; r < nr; r++) {
    double v = red_value(r, i);
    switch (op) {
      case ncclSum: case ncclAvg: acc += v; break;
      case ncclProd: acc *= v; break;
      case ncclMax: acc = v > acc ? v : acc; break;
      case ncclMin: acc = v < acc ? v : acc; break;
      default: break;
    }
  }
  return op == ncclAvg ? (double)(float)((float)acc / (float)nr) : acc;
}

/* ---- one checked call ------------------------------------------------------------------------ */

enum { AR, RS, RED, AG, BC, A2A, P2P, NCOLL };
static const char *const names[NCOLL] = {"AllReduce", "ReduceScatter", "Reduce", "AllGather", "Broadcast",
                                         "AlltoAll", "Send/Recv ring"};
static const size_t MAXC = 4097;
static char *hs, *hr, *ds, *dr;
static double *want;

static void check(const char *what, ncclDataType_t dt, const void *got, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (get(dt, got, i) != want[i]) {
      FAIL("%s: element %zu of %zu is %g, want %g", what, i, n, get(dt, got, i), want[i]);
      return;
    }
}

static void one_call(int coll, ncclDataType_t dt, ncclRedOp_t op, size_t c, int inplace) {
  size_t es = dsize(dt), n = (size_t)nr;
  int root = (int)(c % n);
  size_t sn = coll == RS || coll == A2A ? c * n : c, rn = coll == AG || coll == A2A ? c * n : c;
  char what[160];
  snprintf(what, sizeof what, "%s dt %d op %d count %zu %s", names[coll], (int)dt, (int)op, c,
           inplace ? "in place" : "out of place");
  snprintf(phase, sizeof phase, "%s", what);
  int red = coll == AR || coll == RS || coll == RED;
  for (size_t i = 0; i < sn; i++) put(dt, hs, i, red ? red_value(me, i) : move_value(me, i));
  /* Where the call reads and writes: NCCL's in-place forms. */
  char *sendp = ds, *recvp = dr;
  if (inplace) {
    sendp = recvp = dr;
    if (coll == AG) sendp = dr + (size_t)me * c * es;
    if (coll == RS) recvp = dr + (size_t)me * c * es;
  }
  CK(cudaMemsetAsync(dr, 0xEE, MAXC * n * 8, cs));
  CK(cudaMemcpyAsync(sendp, hs, sn * es, cudaMemcpyHostToDevice, cs));
  int prev = (me + nr - 1) % nr, next = (me + 1) % nr;
  switch (coll) {
    case AR: NK(ncclAllReduce(sendp, recvp, c, dt, op, comm, cs)); break;
    case RS: NK(ncclReduceScatter(sendp, recvp, c, dt, op, comm, cs)); break;
    case RED: NK(ncclReduce(sendp, recvp, c, dt, op, root, comm, cs)); break;
    case AG: NK(ncclAllGather(sendp, recvp, c, dt, comm, cs)); break;
    case BC: NK(ncclBroadcast(sendp, recvp, c, dt, root, comm, cs)); break;
    case A2A: NK(ncclAlltoAll(sendp, recvp, c, dt, comm, cs)); break;
    case P2P:
      NK(ncclGroupStart());
      NK(ncclSend(sendp, c, dt, next, comm, cs));
      NK(ncclRecv(recvp, c, dt, prev, comm, cs));
      NK(ncclGroupEnd());
      break;
  }
  CK(cudaMemcpyAsync(hr, recvp, rn * es, cudaMemcpyDeviceToHost, cs));
  CK(cudaStreamSynchronize(cs));
  for (size_t i = 0; i < rn; i++) {
    switch (coll) {
      case AR: case RED: want[i] = fold(op, i); break;
      case RS: want[i] = fold(op, (size_t)me * c + i); break;
      case AG: want[i] = move_value((int)(i / c), i % c); break;
      case BC: want[i] = move_value(root, i); break;
      case A2A: want[i] = move_value((int)(i / c), (size_t)me * c + i % c); break;
      case P2P: want[i] = move_value(prev, i); break;
    }
  }
  if (coll == RED && me != root) return; /* only the root's output is defined */
  check(what, dt, hr, rn);
}

/* PreMulSum on device buffers: a host scalar (0.5) and a device one (3), float and half. */
static void premul(size_t c) {
  static const ncclDataType_t dts[2] = {ncclFloat32, ncclHalf};
  void *dscalar = NULL;
  CK(cudaMalloc(&dscalar, 8));
  for (int k = 0; k < 2; k++) {
    ncclDataType_t dt = dts[k];
    size_t es = dsize(dt);
    char hv[8], dv[8];
    put(dt, hv, 0, 0.5), put(dt, dv, 0, 3.0);
    CK(cudaMemcpy(dscalar, dv, es, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* a pageable copy may still be in flight; cs does not wait for it */
    for (int dev = 0; dev < 2; dev++) {
      snprintf(phase, sizeof phase, "PreMulSum dt %d %s scalar count %zu", (int)dt, dev ? "device" : "host", c);
      ncclRedOp_t op;
      NK(ncclRedOpCreatePreMulSum(&op, dev ? dscalar : (void *)hv, dt,
                                  dev ? ncclScalarDevice : ncclScalarHostImmediate, comm));
      for (size_t i = 0; i < c; i++) put(dt, hs, i, red_value(me, i));
      CK(cudaMemcpyAsync(ds, hs, c * es, cudaMemcpyHostToDevice, cs));
      NK(ncclAllReduce(ds, dr, c, dt, op, comm, cs));
      CK(cudaMemcpyAsync(hr, dr, c * es, cudaMemcpyDeviceToHost, cs));
      CK(cudaStreamSynchronize(cs));
      for (size_t i = 0; i < c; i++) want[i] = fold(ncclSum, i) * (dev ? 3.0 : 0.5);
      check(phase, dt, hr, c);
      NK(ncclRedOpDestroy(op, comm));
    }
  }
  CK(cudaFree(dscalar));
}

static void sweep(void) {
  static const ncclDataType_t dts[4] = {ncclFloat32, ncclInt32, ncclHalf, ncclBfloat16};
  static const size_t counts[3] = {1, 7, 4097};
  for (int k = 0; k < 3; k++)
    for (int inplace = 0; inplace < 2; inplace++)
      for (int d = 0; d < 4; d++) {
        size_t c = counts[k];
        one_call(AR, dts[d], ncclSum, c, inplace);
        one_call(AR, dts[d], ncclMax, c, inplace);
        if (dts[d] == ncclFloat32) {
          one_call(AR, dts[d], ncclProd, c, inplace);
          one_call(AR, dts[d], ncclMin, c, inplace);
          one_call(AR, dts[d], ncclAvg, c, inplace);
        }
        one_call(RS, dts[d], ncclSum, c, inplace);
        one_call(RED, dts[d], ncclSum, c, inplace);
        one_call(AG, dts[d], ncclSum, c, inplace);
        one_call(BC, dts[d], ncclSum, c, inplace);
        if (!inplace) one_call(A2A, dts[d], ncclSum, c, 0), one_call(P2P, dts[d], ncclSum, c, 0);
      }
  premul(7);
  premul(4097);
}

/* ---- stream order, blocking call, memory, errors ----------------------------------------------- */

static void order(size_t c) {
  enum { ROUNDS = 5 };
  float *in = NULL, *out = NULL, *copies = NULL, *host = NULL;
  CK(cudaMalloc((void **)&in, c * sizeof(float)));
  CK(cudaMalloc((void **)&out, c * sizeof(float)));
  CK(cudaMalloc((void **)&copies, ROUNDS * c * sizeof(float)));
  CK(cudaMallocHost((void **)&host, 2 * ROUNDS * c * sizeof(float)));
  /* No host synchronization from here to the cudaStreamSynchronize. */
  for (int k = 0; k < ROUNDS; k++) {
    CK((cudaError_t)test_slow_fill(in, c, (float)(k + 1 + me), 2000000, cs));
    NK(ncclAllReduce(in, out, c, ncclFloat32, ncclSum, comm, cs));
    CK((cudaError_t)test_copy_out(copies + k * c, out, c, cs));
    CK(cudaMemcpyAsync(host + (ROUNDS + k) * c, out, c * sizeof(float), cudaMemcpyDeviceToHost, cs));
  }
  CK(cudaMemcpyAsync(host, copies, ROUNDS * c * sizeof(float), cudaMemcpyDeviceToHost, cs));
  CK(cudaStreamSynchronize(cs));
  for (int k = 0; k < 2 * ROUNDS; k++) {
    int round = k % ROUNDS;
    float w = (float)(nr * (round + 1) + nr * (nr - 1) / 2);
    for (size_t i = 0; i < c; i++)
      if (host[k * c + i] != w) {
        FAIL("stream order, %zu floats, round %d (%s): element %zu is %g, want %g", c, round,
             k < ROUNDS ? "kernel after" : "cudaMemcpyAsync after", i, host[k * c + i], w);
        break;
      }
  }
  CK(cudaFree(in));
  CK(cudaFree(out));
  CK(cudaFree(copies));
  CK(cudaFreeHost(host));
}

/* A NULL stream with device buffers: the call is complete when it returns; its buffers from
 * ncclMemAlloc, which must be device memory. */
static void blocking_and_memalloc(void) {
  size_t c = 1000;
  float *buf = NULL;
  NK(ncclMemAlloc((void **)&buf, 2 * c * sizeof(float)));
  struct cudaPointerAttributes a;
  CK(cudaPointerGetAttributes(&a, buf));
  if (a.type != cudaMemoryTypeDevice) FAIL("ncclMemAlloc gave memory of type %d, not device memory", (int)a.type);
  for (size_t i = 0; i < c; i++) ((float *)hs)[i] = (float)(me + 1);
  CK(cudaMemcpy(buf, hs, c * sizeof(float), cudaMemcpyHostToDevice));
  NK(ncclAllReduce(buf, buf + c, c, ncclFloat32, ncclSum, comm, NULL));
  CK(cudaMemcpy(hr, buf + c, c * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < c; i++) want[i] = nr * (nr + 1) / 2;
  check("blocking all-reduce on ncclMemAlloc memory", ncclFloat32, hr, c);
  NK(ncclMemFree(buf));
}

static void errors(void) {
  ncclResult_t r = ncclAllReduce(ds, dr, 4, (ncclDataType_t)99, ncclSum, comm, cs);
  if (r != ncclInvalidArgument || strstr(ncclGetLastError(comm), "datatype") == NULL)
    FAIL("a bad datatype gave %d (%s), want ncclInvalidArgument naming the datatype", (int)r, ncclGetLastError(comm));
  r = ncclAllReduce(ds, dr, 4, ncclFloat32, (ncclRedOp_t)4000, comm, cs);
  if (r != ncclInvalidArgument || strstr(ncclGetLastError(comm), "op") == NULL)
    FAIL("a bad op gave %d (%s), want ncclInvalidArgument naming the op", (int)r, ncclGetLastError(comm));
  ncclResult_t async = ncclInternalError;
  NK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) FAIL("ncclCommGetAsyncError gave %d (%s)", (int)async, ncclGetLastError(comm));
}

/* ---- ranks ---------------------------------------------------------------------------------------- */

static int rank_main(int rank, int n, const void *idp, int what) {
  ncclUniqueId id;
  memcpy(&id, idp, sizeof id);
  me = rank, nr = n;
  signal(SIGALRM, stuck);
  alarm(50);
  if (cudaSetDevice(0) != cudaSuccess) return 2;
  ncclResult_t r = ncclCommInitRank(&comm, n, id, rank);
  if (r != ncclSuccess) {
    FAIL("ncclCommInitRank: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
    return 1;
  }
  size_t bytes = MAXC * (size_t)n * 8;
  if (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc((void **)&ds, bytes) != cudaSuccess ||
      cudaMalloc((void **)&dr, bytes) != cudaSuccess || cudaMallocHost((void **)&hs, bytes) != cudaSuccess ||
      cudaMallocHost((void **)&hr, bytes) != cudaSuccess || (want = calloc(MAXC * (size_t)n, sizeof *want)) == NULL) {
    FAIL("cannot make the stream and buffers");
    return 1;
  }
  if (what == 0) sweep();
  if (what == 1) {
    snprintf(phase, sizeof phase, "stream order, 4097 floats");
    order(4097);
    snprintf(phase, sizeof phase, "stream order, 1 Mi floats");
    order((size_t)1 << 20);
    snprintf(phase, sizeof phase, "blocking call and ncclMemAlloc");
    blocking_and_memalloc();
    snprintf(phase, sizeof phase, "errors");
    errors();
  }
  snprintf(phase, sizeof phase, "destroy");
  if (cudaStreamSynchronize(cs) != cudaSuccess) FAIL("the stream failed");
  if (ncclCommDestroy(comm) != ncclSuccess) FAIL("ncclCommDestroy: %s", ncclGetLastError(NULL));
  if (cudaStreamDestroy(cs) != cudaSuccess) FAIL("cudaStreamDestroy failed");
  return fails > 0;
}

static int run(int n, int what) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return -1;
  return gpu_ranks_run(n, rank_main, &id, what);
}

int main(int argc, char **argv) {
  if (gpu_ranks_skip()) return 0;
  int ranks[8], nrk = 0;
  for (int i = 1; i < argc && nrk < 8; i++) ranks[nrk++] = atoi(argv[i]);
  if (nrk == 0) ranks[0] = 2, ranks[1] = 3, nrk = 2;
  static const char *const part_names[2] = {
      "sweep (every collective, float/int32/half/bf16, in and out of place, counts 1, 7, 4097; PreMulSum)",
      "stream order (kernel before, kernel and copy after, no host wait), blocking call, ncclMemAlloc, errors"};
  printf("1..%d\n", 2 * nrk);
  int t = 0, failed = 0;
  for (int i = 0; i < nrk; i++)
    for (int k = 1; k >= 0; k--) {
      int bad = run(ranks[i], k);
      printf("%sok %d - %d ranks sharing one GPU through nccl.h: %s\n", bad ? "not " : "", ++t, ranks[i], part_names[k]);
      failed |= bad;
      fflush(stdout);
    }
  return failed;
}

/* test_nccl_api.c: a program written against NCCL's documented API only (it includes
 * <nccl.h>, never weft.h), linked to weft's libnccl.so.2, calling every function of the header
 * with results checked, on 1 to 4 ranks over shm and over TCP.
 *
 * The parent creates the unique ids (their bootstrap roots live in it) and forks the ranks;
 * each rank prints "# rank R: ..." for every failed check and exits with their number. One
 * TAP line per run, plus the single-process checks (ncclCommInitAll driving 3 ranks from one
 * thread, error strings, versions, enum values). Values are small integers, exact in every
 * datatype. The only line that is not NCCL's API is the ncclWeftStreamCreate section
 * (nccl_weft.h, weft's addition): a stream handed to every kind of call. */
#include <nccl.h>
#include <nccl_weft.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* NCCL 2.28's numeric values, from its documentation: the header must agree. */
_Static_assert(ncclSuccess == 0 && ncclUnhandledCudaError == 1 && ncclSystemError == 2 &&
                   ncclInternalError == 3 && ncclInvalidArgument == 4 && ncclInvalidUsage == 5 &&
                   ncclRemoteError == 6 && ncclInProgress == 7 && ncclNumResults == 8, "ncclResult_t");
_Static_assert(ncclInt8 == 0 && ncclChar == 0 && ncclUint8 == 1 && ncclInt32 == 2 && ncclInt == 2 &&
                   ncclUint32 == 3 && ncclInt64 == 4 && ncclUint64 == 5 && ncclFloat16 == 6 &&
                   ncclHalf == 6 && ncclFloat32 == 7 && ncclFloat == 7 && ncclFloat64 == 8 &&
                   ncclDouble == 8 && ncclBfloat16 == 9 && ncclFloat8e4m3 == 10 &&
                   ncclFloat8e5m2 == 11 && ncclNumTypes == 12, "ncclDataType_t");
_Static_assert(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 && ncclAvg == 4 &&
                   ncclNumOps == 5 && ncclMaxRedOp == 0x7fffffff && sizeof(ncclRedOp_t) == 4, "ncclRedOp_t");
_Static_assert(ncclScalarDevice == 0 && ncclScalarHostImmediate == 1, "ncclScalarResidence_t");
_Static_assert(NCCL_SPLIT_NOCOLOR == -1 && NCCL_UNIQUE_ID_BYTES == 128 && NCCL_WIN_DEFAULT == 0 &&
                   NCCL_WIN_COLL_SYMMETRIC == 1 && NCCL_SHRINK_ABORT == 1 && NCCL_CTA_POLICY_ZERO == 2,
               "constants");
_Static_assert(sizeof(ncclUniqueId) == 128 && NCCL_VERSION(2, 28, 9) == 22809 && NCCL_VERSION(2, 8, 4) == 2804,
               "version encoding");

static int me = -1, nranks, fails;

static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "# rank %d: ", me);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fails++;
}

#define CHECK(cond, ...) \
  do {                   \
    if (!(cond)) fail(__VA_ARGS__); \
  } while (0)
#define EXPECT(call, want)                                                                      \
  do {                                                                                          \
    ncclResult_t r_ = (call);                                                                   \
    if (r_ != (want)) fail("line %d: %s = %d (%s), want %d; last error: %s", __LINE__, #call, r_, \
                           ncclGetErrorString(r_), (int)(want), ncclGetLastError(NULL));      \
  } while (0)
#define OK(call) EXPECT(call, ncclSuccess)

/* ---- elements of every datatype, for small integer values ------------------------------ */

static size_t esize(ncclDataType_t dt) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return sizes[dt];
}

static uint16_t to_half(double v) { /* exact for integers of magnitude <= 2048 */
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  double a = v < 0 ? -v : v;
  int e = 0;
  while (a >= 2) a /= 2, e++;
  return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)((a - 1) * 1024));
}

static double from_half(uint16_t h) {
  int e = (h >> 10) & 31;
  double m = h & 1023;
  double v = e == 0 ? m / 1024 / 16384 : (1 + m / 1024) * (double)(1u << e) / 32768;
  return (h & 0x8000) ? -v : v;
}

static void put(void *p, size_t i, ncclDataType_t dt, double v) {
  char *b = (char *)p + i * esize(dt);
  switch (dt) {
    case ncclInt8: *(int8_t *)b = (int8_t)v; break;
    case ncclUint8: *(uint8_t *)b = (uint8_t)v; break;
    case ncclInt32: *(int32_t *)b = (int32_t)v; break;
    case ncclUint32: *(uint32_t *)b = (uint32_t)v; break;
    case ncclInt64: *(int64_t *)b = (int64_t)v; break;
    case ncclUint64: *(uint64_t *)b = (uint64_t)v; break;
    case ncclFloat16: *(uint16_t *)b = to_half(v); break;
    case ncclFloat32: *(float *)b = (float)v; break;
    case ncclFloat64: *(double *)b = v; break;
    case ncclBfloat16: { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); *(uint16_t *)b = (uint16_t)(u >> 16); break; }
    default: break;
  }
}

static double get(const void *p, size_t i, ncclDataType_t dt) {
  const char *b = (const char *)p + i * esize(dt);
  switch (dt) {
    case ncclInt8: return *(const int8_t *)b;
    case ncclUint8: return *(const uint8_t *)b;
    case ncclInt32: return *(const int32_t *)b;
    case ncclUint32: return *(const uint32_t *)b;
    case ncclInt64: return (double)*(const int64_t *)b;
    case ncclUint64: return (double)*(const uint64_t *)b;
    case ncclFloat16: return from_half(*(const uint16_t *)b);
    case ncclFloat32: return *(const float *)b;
    case ncclFloat64: return *(const double *)b;
    case ncclBfloat16: { uint32_t u = (uint32_t)*(const uint16_t *)b << 16; float f; memcpy(&f, &u, 4); return f; }
    default: return 0;
  }
}

/* Checks count elements of buf against want(i). */
static void check_buf(const char *what, const void *buf, size_t count, ncclDataType_t dt,
                      double (*want)(size_t i, double arg), double arg) {
  for (size_t i = 0; i < count; i++)
    if (get(buf, i, dt) != want(i, arg)) {
      fail("%s dtype %d: element %zu is %g, want %g", what, (int)dt, i, get(buf, i, dt), want(i, arg));
      return;
    }
}

/* ---- the ranks' checks ------------------------------------------------------------------ */

#define COUNT 1031 /* odd, larger than one cache line of every datatype */

/* Input of rank r for op: r + 1 (prod: 1 or 2, so the product stays exact). */
static double input(int r, ncclRedOp_t op) { return op == ncclProd ? (double)(r % 2 + 1) : (double)(r + 1); }

static double reduced(ncclRedOp_t op, ncclDataType_t dt) {
  double sum = 0, prod = 1;
  for (int r = 0; r < nranks; r++) sum += input(r, op), prod *= input(r, op);
  switch (op) {
    case ncclSum: return sum;
    case ncclProd: return prod;
    case ncclMax: return nranks;
    case ncclMin: return 1;
    default: return dt <= ncclUint64 ? (double)((long)sum / nranks) : sum / nranks;
  }
}

static double const_want(size_t i, double arg) { return arg; }

static void all_reduce_every_type_and_op(ncclComm_t comm) {
  for (int dt = ncclInt8; dt <= ncclBfloat16; dt++)
    for (int op = ncclSum; op <= ncclAvg; op++) {
      char *send = malloc(COUNT * 8), *recv = malloc(COUNT * 8);
      for (size_t i = 0; i < COUNT; i++) put(send, i, dt, input(me, op));
      int in_place = (dt + op) % 2;
      OK(ncclAllReduce(send, in_place ? send : recv, COUNT, dt, op, comm, NULL));
      char what[64];
      snprintf(what, sizeof(what), "ncclAllReduce op %d%s", op, in_place ? " in place" : "");
      check_buf(what, in_place ? send : recv, COUNT, dt, const_want, reduced(op, dt));
      free(send), free(recv);
    }
}

static double rank_block(size_t i, double arg) { return (double)(i / (size_t)arg); } /* block r holds r */
static double rank_plus_one_block(size_t i, double arg) { return (double)(i / (size_t)arg) * 10 + me; }

static void data_movement(ncclComm_t comm) {
  const ncclDataType_t dt = ncclInt32;
  const size_t n = 37;
  int32_t *buf = calloc(n * nranks, 4), *out = calloc(n * nranks, 4);
  for (size_t i = 0; i < n; i++) buf[i] = me == nranks - 1 ? 77 : -1;
  OK(ncclBroadcast(buf, buf, n, dt, nranks - 1, comm, NULL));
  check_buf("ncclBroadcast", buf, n, dt, const_want, 77);
  for (size_t i = 0; i < n; i++) buf[i] = me == 0 ? 5 : -1;
  OK(ncclBcast(buf, n, dt, 0, comm, NULL));
  check_buf("ncclBcast", buf, n, dt, const_want, 5);
  for (size_t i = 0; i < n; i++) buf[i] = me + 1;
  OK(ncclReduce(buf, out, n, dt, ncclSum, 0, comm, NULL));
  if (me == 0) check_buf("ncclReduce", out, n, dt, const_want, nranks * (nranks + 1) / 2);
  for (size_t i = 0; i < n; i++) buf[i] = me;
  OK(ncclAllGather(buf, out, n, dt, comm, NULL));
  check_buf("ncclAllGather", out, n * nranks, dt, rank_block, (int)n);
  for (size_t i = 0; i < n * nranks; i++) buf[i] = (int32_t)(i / n) + me; /* block b: b + me */
  OK(ncclReduceScatter(buf, out, n, dt, ncclSum, comm, NULL));
  check_buf("ncclReduceScatter", out, n, dt, const_want, nranks * me + nranks * (nranks - 1) / 2);
  for (size_t i = 0; i < n * nranks; i++) buf[i] = me * 10 + (int32_t)(i / n); /* block p: to rank p */
  OK(ncclAlltoAll(buf, out, n, dt, comm, NULL));
  check_buf("ncclAlltoAll", out, n * nranks, dt, rank_plus_one_block, (int)n);
  for (size_t i = 0; i < n; i++) buf[i] = me;
  OK(ncclGather(buf, out, n, dt, nranks - 1, comm, NULL));
  if (me == nranks - 1) check_buf("ncclGather", out, n * nranks, dt, rank_block, (int)n);
  for (size_t i = 0; i < n * nranks; i++) buf[i] = (int32_t)(i / n);
  OK(ncclScatter(buf, out, n, dt, 0, comm, NULL));
  check_buf("ncclScatter", out, n, dt, const_want, me);
  free(buf), free(out);
}

/* A ring exchange in a group (1 rank: a send to itself), and two collectives in one group. */
static void p2p_and_groups(ncclComm_t comm) {
  double s[64], r[64];
  for (int i = 0; i < 64; i++) s[i] = me * 100 + i, r[i] = -1;
  OK(ncclGroupStart());
  OK(ncclSend(s, 64, ncclDouble, (me + 1) % nranks, comm, NULL));
  OK(ncclRecv(r, 64, ncclDouble, (me + nranks - 1) % nranks, comm, NULL));
  OK(ncclGroupEnd());
  for (int i = 0; i < 64; i++) CHECK(r[i] == ((me + nranks - 1) % nranks) * 100 + i, "ring recv[%d] = %g", i, r[i]);
  float a = 1, b = (float)me;
  OK(ncclGroupStart());
  OK(ncclGroupStart()); /* groups nest: the outermost end launches */
  OK(ncclAllReduce(&a, &a, 1, ncclFloat, ncclSum, comm, NULL));
  OK(ncclGroupEnd());
  OK(ncclAllReduce(&b, &b, 1, ncclFloat, ncclMax, comm, NULL));
  OK(ncclGroupEnd());
  CHECK(a == nranks && b == nranks - 1, "grouped all-reduces gave %g and %g", a, b);
  EXPECT(ncclGroupEnd(), ncclInvalidUsage);
  /* A simulated group is discarded, not run: the next call still matches on every rank. */
  OK(ncclGroupStart());
  OK(ncclAllReduce(&a, &a, 1, ncclFloat, ncclSum, comm, NULL));
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
  CHECK(a == nranks, "a simulated all-reduce ran: %g", a);
  OK(ncclAllReduce(&a, &a, 1, ncclFloat, ncclSum, comm, NULL));
  CHECK(a == (float)nranks * nranks, "all-reduce after a simulated group gave %g", a);
}

static void premul_sum(ncclComm_t comm) {
  ncclRedOp_t half_sum, triple, twice;
  float f = 0.5f;
  OK(ncclRedOpCreatePreMulSum(&half_sum, &f, ncclFloat, ncclScalarHostImmediate, comm));
  f = 100; /* read at creation: no effect */
  float x[5] = {2, 2, 2, 2, 2}, y[5];
  OK(ncclAllReduce(x, y, 5, ncclFloat, half_sum, comm, NULL));
  for (int i = 0; i < 5; i++) CHECK(y[i] == nranks && x[i] == 2, "premul 0.5 all-reduce: %g (input %g)", y[i], x[i]);
  double d = 1;
  OK(ncclRedOpCreatePreMulSum(&triple, &d, ncclDouble, ncclScalarDevice, comm));
  d = 3; /* ncclScalarDevice: read at the call */
  double v = me + 1, w = 0;
  OK(ncclReduce(&v, &w, 1, ncclDouble, triple, 0, comm, NULL));
  if (me == 0) CHECK(w == 3.0 * nranks * (nranks + 1) / 2, "premul 3 reduce: %g", w);
  int32_t two = 2, rs_in[8], rs_out[2];
  OK(ncclRedOpCreatePreMulSum(&twice, &two, ncclInt32, ncclScalarHostImmediate, comm));
  for (int i = 0; i < 2 * nranks; i++) rs_in[i] = i;
  OK(ncclReduceScatter(rs_in, rs_out, 2, ncclInt32, twice, comm, NULL));
  for (int i = 0; i < 2; i++) CHECK(rs_out[i] == 2 * nranks * (2 * me + i), "premul 2 reduce-scatter: %d", rs_out[i]);
  EXPECT(ncclAllReduce(&v, &w, 1, ncclFloat, triple, comm, NULL), ncclInvalidArgument); /* wrong type */
  OK(ncclRedOpDestroy(half_sum, comm));
  OK(ncclRedOpDestroy(triple, comm));
  OK(ncclRedOpDestroy(twice, comm));
  EXPECT(ncclRedOpDestroy(twice, comm), ncclInvalidArgument);
  EXPECT(ncclAllReduce(x, y, 5, ncclFloat, half_sum, comm, NULL), ncclInvalidArgument);
}

static void unsupported_cases(ncclComm_t comm) {
  char b[16] = {0};
  EXPECT(ncclAllReduce(b, b, 4, ncclFloat8e4m3, ncclSum, comm, NULL), ncclInvalidUsage);
  CHECK(strstr(ncclGetLastError(comm), "fp8") != NULL, "fp8 message: %s", ncclGetLastError(comm));
  EXPECT(ncclBroadcast(b, b, 4, ncclFloat8e5m2, 0, comm, NULL), ncclInvalidUsage);
  /* A made-up cudaStream_t: refused where there is no GPU (or no CUDA in the build); where
   * there is one, it is taken as a CUDA stream and, as with NCCL, its use is undefined. */
  if (access("/dev/nvidiactl", F_OK) != 0) {
    EXPECT(ncclAllReduce(b, b, 4, ncclFloat, ncclSum, comm, (cudaStream_t)0x1234), ncclInvalidUsage);
    CHECK(strstr(ncclGetLastError(comm), "stream") != NULL, "stream message: %s", ncclGetLastError(comm));
  }
  EXPECT(ncclAllReduce(b, b, 4, (ncclDataType_t)99, ncclSum, comm, NULL), ncclInvalidArgument);
  EXPECT(ncclAllReduce(b, b, 4, ncclFloat, (ncclRedOp_t)4000, comm, NULL), ncclInvalidArgument);
  int dev = 7;
  EXPECT(ncclCommCuDevice(comm, &dev), ncclInvalidUsage);
  CHECK(dev == -1, "ncclCommCuDevice gave %d", dev);
  EXPECT(ncclAllReduce(b, b, 4, ncclFloat, ncclSum, NULL, NULL), ncclInvalidArgument);
  /* cudaStreamLegacy and cudaStreamPerThread are the default stream: accepted. */
  float one = 1;
  OK(ncclAllReduce(&one, &one, 1, ncclFloat, ncclSum, comm, (cudaStream_t)0x1));
  OK(ncclAllReduce(&one, &one, 1, ncclFloat, ncclSum, comm, (cudaStream_t)0x2));
  CHECK(one == (float)nranks * nranks, "all-reduce on the legacy stream gave %g", one);
}

static void split_shrink_revoke_abort(ncclComm_t comm) {
  ncclComm_t child = NULL;
  OK(ncclCommSplit(comm, me % 2, -me, &child, NULL));
  int n = -1, r = -1, want_n = (nranks + 1 - me % 2) / 2;
  OK(ncclCommCount(child, &n));
  OK(ncclCommUserRank(child, &r));
  CHECK(n == want_n && r == (nranks - 1 - me) / 2, "split: size %d rank %d", n, r);
  int v = me;
  OK(ncclAllReduce(&v, &v, 1, ncclInt, ncclMax, child, NULL));
  CHECK(v % 2 == me % 2 && v >= me, "split all-reduce max gave %d", v);
  OK(ncclCommDestroy(child));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  OK(ncclCommSplit(comm, me == 0 ? NCCL_SPLIT_NOCOLOR : 3, me, &child, &cfg));
  CHECK((me == 0) == (child == NULL), "NOCOLOR split: child %p", (void *)child);
  if (child != NULL) OK(ncclCommDestroy(child));
  if (nranks > 1) { /* the last rank is left out and does not call ncclCommShrink */
    int ex = nranks - 1;
    if (me != ex) {
      OK(ncclCommShrink(comm, &ex, 1, &child, NULL, NCCL_SHRINK_DEFAULT));
      OK(ncclCommCount(child, &n));
      v = 1;
      OK(ncclAllReduce(&v, &v, 1, ncclInt, ncclSum, child, NULL));
      CHECK(n == nranks - 1 && v == nranks - 1, "shrink: size %d, sum %d", n, v);
      OK(ncclCommDestroy(child));
    }
    v = 1; /* the parent still works, the excluded rank included */
    OK(ncclAllReduce(&v, &v, 1, ncclInt, ncclSum, comm, NULL));
    CHECK(v == nranks, "parent after shrink: %d", v);
  }
  OK(ncclCommSplit(comm, 0, me, &child, NULL));
  EXPECT(ncclCommRevoke(child, 5), ncclInvalidArgument);
  OK(ncclCommRevoke(child, NCCL_REVOKE_DEFAULT));
  EXPECT(ncclAllReduce(&v, &v, 1, ncclInt, ncclSum, child, NULL), ncclInvalidUsage);
  OK(ncclCommDestroy(child));
  OK(ncclCommSplit(comm, 0, me, &child, NULL));
  /* Abort only once every rank's split has returned: a rank whose init finished first would
   * otherwise abort while a peer still waits for its connections, and that peer's split then
   * rightly fails naming it (a race seen on an idle machine). The parent's all-reduce is the
   * barrier; the child is not used again, so no rank waits on the aborted one. */
  v = 1;
  OK(ncclAllReduce(&v, &v, 1, ncclInt, ncclSum, comm, NULL));
  OK(ncclCommAbort(child));
}

static void memory_and_windows(ncclComm_t comm) {
  const size_t n = 4096;
  float *buf = NULL;
  OK(ncclMemAlloc((void **)&buf, 2 * n * sizeof(float)));
  if (buf == NULL) return;
  ncclWindow_t win = NULL;
  OK(ncclCommWindowRegister(comm, buf, 2 * n * sizeof(float), &win, NCCL_WIN_COLL_SYMMETRIC));
  for (size_t i = 0; i < n; i++) buf[i] = (float)(me + 1);
  OK(ncclAllReduce(buf, buf + n, n, ncclFloat, ncclSum, comm, NULL));
  check_buf("all-reduce on a window", buf + n, n, ncclFloat, const_want, nranks * (nranks + 1) / 2);
  OK(ncclCommWindowDeregister(comm, win));
  void *handle = NULL;
  OK(ncclCommRegister(comm, buf, n, &handle));
  OK(ncclCommDeregister(comm, handle));
  EXPECT(ncclCommDeregister(comm, buf), ncclInvalidArgument);
  OK(ncclMemFree(buf));
  float plain[4];
  EXPECT(ncclCommWindowRegister(comm, plain, sizeof(plain), &win, 0), ncclInvalidArgument);
}

/* weft's addition (nccl_weft.h): a weft stream as the stream argument; calls still complete
 * before they return. */
static void weft_stream(ncclComm_t comm) {
  cudaStream_t s = NULL;
  OK(ncclWeftStreamCreate(&s));
  int v = 2, w = 0;
  OK(ncclAllReduce(&v, &w, 1, ncclInt, ncclProd, comm, s));
  CHECK(w == 1 << nranks, "all-reduce on a weft stream gave %d", w);
  OK(ncclGroupStart());
  OK(ncclAllReduce(&v, &w, 1, ncclInt, ncclSum, comm, s));
  OK(ncclGroupEnd());
  CHECK(w == 2 * nranks, "grouped all-reduce on a weft stream gave %d", w);
  OK(ncclWeftStreamDestroy(s));
  EXPECT(ncclWeftStreamDestroy(s), ncclInvalidArgument);
}

static int rank_main(const ncclUniqueId ids[4]) {
  int version = 0;
  OK(ncclGetVersion(&version));
  CHECK(version == NCCL_VERSION_CODE, "version %d", version);
  /* Non-blocking init: poll the async error until the communicator is ready. */
  ncclComm_t comm = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, ids[0], me, &cfg);
  CHECK(r == ncclSuccess || r == ncclInProgress, "non-blocking init: %d (%s)", r, ncclGetLastError(NULL));
  ncclResult_t async = ncclInProgress;
  while (comm != NULL && ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclInProgress) usleep(100);
  CHECK(comm != NULL && async == ncclSuccess, "init completed with %d: %s", async, ncclGetLastError(NULL));
  if (comm == NULL) return fails;
  int n = -1, rk = -1;
  OK(ncclCommCount(comm, &n));
  OK(ncclCommUserRank(comm, &rk));
  CHECK(n == nranks && rk == me, "count %d rank %d", n, rk);
  all_reduce_every_type_and_op(comm);
  data_movement(comm);
  p2p_and_groups(comm);
  premul_sum(comm);
  unsupported_cases(comm);
  split_shrink_revoke_abort(comm);
  memory_and_windows(comm);
  weft_stream(comm);
  OK(ncclCommFinalize(comm));
  OK(ncclCommDestroy(comm));
  /* ncclCommInitRank, and ncclCommInitRankScalable with one id. */
  OK(ncclCommInitRank(&comm, nranks, ids[1], me));
  int v = 1;
  OK(ncclAllReduce(&v, &v, 1, ncclInt, ncclSum, comm, NULL));
  CHECK(v == nranks, "all-reduce on ncclCommInitRank's comm gave %d", v);
  OK(ncclCommDestroy(comm));
  ncclUniqueId scalable = ids[2];
  OK(ncclCommInitRankScalable(&comm, nranks, me, 1, &scalable, NULL));
  OK(ncclBcast(&v, 1, ncclInt, 0, comm, NULL));
  OK(ncclCommDestroy(comm));
  /* A config with a bad magic is refused; an older, shorter config is read only as far as
   * its size goes (the rest of the struct here is garbage and must not matter). */
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0x1234;
  EXPECT(ncclCommInitRankConfig(&comm, nranks, ids[1], me, &bad), ncclInvalidArgument);
  ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
  old.size = offsetof(ncclConfig_t, blocking); /* a caller whose struct ends before blocking */
  old.blocking = 7;                            /* beyond its size: never read, so no error */
  EXPECT(ncclCommInitRankConfig(&comm, nranks, ids[3], me, &old), ncclSuccess); /* blocking default */
  OK(ncclCommDestroy(comm));
  return fails;
}

/* ---- runs ------------------------------------------------------------------------------ */

static int test_no = 0, test_failed = 0;

static void tap(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s %d - ", ok ? "ok" : "not ok", ++test_no);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  if (!ok) test_failed++;
}

/* The ids of a run come from a child, the "root host", which keeps their bootstrap root
 * threads until the run ends: the ranks are forked from this process, which must have no
 * thread then. A thread inside malloc at fork time leaves ASan's allocator locked in the
 * child (ASan has no fork handlers), and that rank hung until its alarm: 1-4 cases of this
 * test under make check-sanitize (issue 15 defect 9, as in tests/harness.c). Returns the
 * root host's pid (close *fd, then reap it, when the run is over), or -1. */
static pid_t ids_from_root_host(ncclUniqueId ids[4], int *fd) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  fflush(stdout);
  pid_t parent = getpid(), pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    close(sv[0]);
    unsigned char ok = 1;
    for (int i = 0; i < 4; i++) ok = ok && ncclGetUniqueId(&ids[i]) == ncclSuccess;
    if (!ok) fprintf(stderr, "# root host: ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
    if (write(sv[1], &ok, 1) != 1 || write(sv[1], ids, sizeof(ncclUniqueId) * 4) != (ssize_t)(sizeof(ncclUniqueId) * 4))
      _exit(1);
    char c;
    while (read(sv[1], &c, 1) < 0 && errno == EINTR) { /* until the parent closes its end (or dies) */
    }
    _exit(0);
  }
  close(sv[1]);
  unsigned char ok = 0;
  size_t want = sizeof(ncclUniqueId) * 4, got = 0;
  int good = pid > 0 && read(sv[0], &ok, 1) == 1 && ok;
  while (good && got < want) {
    ssize_t k = read(sv[0], (char *)ids + got, want - got);
    if (k <= 0) good = 0;
    else got += (size_t)k;
  }
  if (!good) {
    close(sv[0]);
    if (pid > 0) waitpid(pid, NULL, 0);
    return -1;
  }
  *fd = sv[0];
  return pid;
}

static void run_ranks(int n, const char *transport) {
  ncclUniqueId ids[4];
  int host_fd = -1;
  pid_t host = ids_from_root_host(ids, &host_fd);
  if (host < 0) {
    tap(0, "every call on %d ranks over %s: no unique ids from the root host", n, transport);
    return;
  }
  pid_t pids[8];
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      setenv("WEFT_TRANSPORT", transport, 1);
      me = r, nranks = n;
      alarm(120); /* a hang fails the run instead of blocking the suite */
      _exit(rank_main(ids) > 100 ? 100 : fails);
    }
  }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      bad++;
      fprintf(stderr, "# rank %d of %d over %s: %s %d\n", r, n, transport,
              WIFEXITED(status) ? "failed checks:" : "killed by signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
  }
  close(host_fd);
  waitpid(host, NULL, 0);
  tap(bad == 0, "every call on %d ranks over %s", n, transport);
}

/* ncclCommInitAll: 3 ranks in this process, driven from this one thread as NCCL programs
 * drive a node's GPUs: a group of one all-reduce per communicator. */
static void init_all_single_thread(void) {
  ncclComm_t comms[3];
  int ok = ncclCommInitAll(comms, 3, NULL) == ncclSuccess;
  float v[3] = {1, 2, 3};
  if (ok) {
    ok = ncclGroupStart() == ncclSuccess;
    for (int i = 0; i < 3; i++) ok = ok && ncclAllReduce(&v[i], &v[i], 1, ncclFloat, ncclSum, comms[i], NULL) == ncclSuccess;
    ok = ok && ncclGroupEnd() == ncclSuccess;
    for (int i = 0; i < 3; i++) ok = ok && v[i] == 6;
    int rk = -1;
    for (int i = 0; i < 3; i++) ok = ok && ncclCommUserRank(comms[i], &rk) == ncclSuccess && rk == i;
    for (int i = 0; i < 3; i++) ok = ok && ncclCommDestroy(comms[i]) == ncclSuccess;
  }
  tap(ok, "ncclCommInitAll: 3 ranks in one process, one group of all-reduces from one thread (%s)",
      ok ? "6 on every rank" : ncclGetLastError(NULL));
}

/* nccl-tests' threads mode: one thread inits every rank inside a group (each init returns
 * at once, ncclGroupEnd waits for all), then each rank's thread calls on its own. */
typedef struct {
  ncclComm_t comm;
  int v, ok;
} group_rank;

static void *group_rank_main(void *arg) {
  group_rank *g = arg;
  g->ok = ncclGroupStart() == ncclSuccess && ncclAllReduce(&g->v, &g->v, 1, ncclInt, ncclSum, g->comm, NULL) == ncclSuccess &&
          ncclGroupEnd() == ncclSuccess;
  return NULL;
}

static void init_in_group_single_thread(void) {
  enum { N = 3 };
  group_rank g[N];
  pthread_t th[N];
  ncclUniqueId id;
  int ok = ncclGetUniqueId(&id) == ncclSuccess && ncclGroupStart() == ncclSuccess;
  for (int i = 0; i < N; i++) ok = ok && ncclCommInitRank(&g[i].comm, N, id, i) == ncclSuccess;
  ok = ok && ncclGroupEnd() == ncclSuccess;
  for (int i = 0; i < N && ok; i++) g[i].v = i + 1, ok = pthread_create(&th[i], NULL, group_rank_main, &g[i]) == 0;
  for (int i = 0; i < N && ok; i++) pthread_join(th[i], NULL), ok = g[i].ok && g[i].v == N * (N + 1) / 2;
  for (int i = 0; i < N && ok; i++) ok = ncclCommDestroy(g[i].comm) == ncclSuccess;
  tap(ok, "ncclCommInitRank of 3 ranks inside one group from one thread, then a rank per thread (%s)",
      ok ? "6 on every rank" : ncclGetLastError(NULL));
}

static void error_strings(void) {
  int ok = 1;
  for (int r = 0; r < ncclNumResults; r++)
    for (int q = 0; q < r; q++)
      ok = ok && ncclGetErrorString(r) != NULL && strcmp(ncclGetErrorString(r), ncclGetErrorString(q)) != 0;
  ok = ok && ncclGetErrorString((ncclResult_t)42) != NULL;
  ok = ok && pncclGetErrorString(ncclInvalidUsage) == ncclGetErrorString(ncclInvalidUsage);
  int v = 0;
  ok = ok && pncclGetVersion(&v) == ncclSuccess && v == 22809;
  EXPECT(ncclGetVersion(NULL), ncclInvalidArgument);
  ok = ok && ncclCommDestroy(NULL) == ncclSuccess && fails == 0;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();
#pragma GCC diagnostic pop
  tap(ok, "error strings distinct, version 22809, pnccl entry points");
}

int main(void) {
  /* This test writes ncclMemAlloc's memory on the host: host memory also where a CUDA device
   * is present (libnccl.so.2 built with CUDA gives device memory there, as NCCL does). */
  setenv("WEFT_NCCL_MEM", "host", 0);
  printf("1..11\n");
  error_strings();
  static const char *transports[] = {"shm", "socket"};
  for (int t = 0; t < 2; t++)
    for (int n = 1; n <= 4; n++) run_ranks(n, transports[t]);
  /* Last: its communicators' threads in this process must not be alive when ranks fork. */
  init_all_single_thread();
  init_in_group_single_thread();
  return test_failed ? 1 : 0;
}

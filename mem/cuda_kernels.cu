/* cuda_kernels.cu: the device memory space's element-wise kernels (mem/cuda_kernels.h):
 * reduce (dst = a op b), the final division of WEFT_AVG, and the fused fan-out reduction
 * (every output = the fold of every input), each giving the host kernels' bits.
 *
 * Shape. One grid-stride kernel template runs every operation; a small functor says what
 * one element (one()) and one 16-byte vector (vec()) of it do. The elements in
 * [head, head + nvec * W) go as 16-byte loads and stores, where every pointer of the call
 * has the same address mod 16 (head elements bring them to a 16-byte boundary); the head,
 * the tail and calls whose pointers disagree go element by element, still coalesced. The
 * kernels are bound by memory, not by arithmetic: the grid is as many 256-thread blocks as
 * fit on the device at once (never more than the work needs), so one wave keeps every SM's
 * loads in flight and no block waits for a second wave.
 *
 * Semantics, as mem/reduce.c defines them and the host's x86 FPU computes them:
 * - integer sum and prod wrap: computed on the unsigned type;
 * - float max / min are `a > b ? a : b` / `a < b ? a : b` (b on NaN or equal, unquieted);
 * - float sum / prod / divide round to nearest-even with the _rn intrinsics (which also
 *   keep nvcc from contracting anything into an FMA), and their NaNs are the host's
 *   (nan_fix below): the GPU returns a canonical NaN, x86 the first NaN operand made
 *   quiet, or its negative default NaN for an invalid operation;
 * - fp16 / bf16 widen to fp32 for each operation and round back to nearest-even
 *   (mem/cuda_half.cuh, integer code with half.c's bits);
 * - WEFT_AVG reduces as sum; the division is weft__avg_finalize's: integers truncate in
 *   the type's own arithmetic (8-bit ones in int / unsigned, as C promotes them), floats
 *   divide by (float)n or (double)n, fp16 / bf16 in fp32.
 * - The fan-out folds left, in[0] op in[1] op ..., rounding to the datatype after every
 *   step, then divides: the bits of weft__reduce_nt and of the pairwise weft__reduce
 *   fold + weft__avg_finalize that the direct all-reduce falls back to.
 * Build without -use_fast_math / -ftz=true: fp32 denormals must be kept, as on the host. */
#include <atomic>
#include <cstdint>
#include <type_traits>
#include <cuda_runtime.h>
#include "mem/cuda_kernels.h"
#include "mem/cuda_half.cuh"

namespace weft_cuda {

/* ---- NaNs as the host makes them --------------------------------------------------- */

/* The NaN an invalid operation (inf - inf, 0 * inf) gives on the host: x86's "real
 * indefinite" has the sign bit set; ARM's default NaN does not. */
#if defined(__aarch64__)
constexpr uint32_t kDefaultNan32 = 0x7fc00000u;
constexpr uint64_t kDefaultNan64 = 0x7ff8000000000000ull;
#else
constexpr uint32_t kDefaultNan32 = 0xffc00000u;
constexpr uint64_t kDefaultNan64 = 0xfff8000000000000ull;
#endif

__device__ __forceinline__ bool is_nan(float x) { return (__float_as_uint(x) & 0x7fffffffu) > 0x7f800000u; }
__device__ __forceinline__ bool is_nan(double x) {
  return ((unsigned long long)__double_as_longlong(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}
__device__ __forceinline__ float quiet(float x) { return __uint_as_float(__float_as_uint(x) | 0x00400000u); }
__device__ __forceinline__ double quiet(double x) {
  return __longlong_as_double(__double_as_longlong(x) | 0x0008000000000000ll);
}
__device__ __forceinline__ float default_nan(float) { return __uint_as_float(kDefaultNan32); }
__device__ __forceinline__ double default_nan(double) { return __longlong_as_double((long long)kDefaultNan64); }

/* r = a op b as the device computed it; when r is a NaN, the one x86 would have given:
 * the first NaN operand, quiet, else the default NaN. Off the common path: one compare. */
template <typename F>
__device__ __forceinline__ F nan_fix(F r, F a, F b) {
  if (!is_nan(r)) return r;
  if (is_nan(a)) return quiet(a);
  if (is_nan(b)) return quiet(b);
  return default_nan(r);
}

__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }

/* ---- One operation on computed values (C: int*_t, uint*_t, float, double) ---------- */

template <int OP, typename C>
__device__ __forceinline__ C combine(C a, C b) {
  if constexpr (OP == WEFT_MAX) return a > b ? a : b;
  else if constexpr (OP == WEFT_MIN) return a < b ? a : b;
  else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>; /* wraps; the cast back narrows 8-bit promotions */
    if constexpr (OP == WEFT_PROD) return (C)(U)((U)a * (U)b);
    else return (C)(U)((U)a + (U)b);
  } else if constexpr (OP == WEFT_PROD) {
    return nan_fix(mul_rn(a, b), a, b);
  } else {
    return nan_fix(add_rn(a, b), a, b);
  }
}

/* weft__avg_finalize's division by k (> 1). 8-bit integers divide as C promotes them on
 * the host (int8 in int, uint8 in unsigned), so any k is exact; wider ones in their own
 * type. A float quotient of a non-NaN by k > 1 is never NaN: nan_fix only quiets x. */
template <typename C>
__device__ __forceinline__ C divide(C x, int k) {
  if constexpr (std::is_floating_point_v<C>) {
    return nan_fix(div_rn(x, (C)k), x, (C)k);
  } else if constexpr (sizeof(C) == 1) {
    using D = std::conditional_t<std::is_signed_v<C>, int, unsigned>;
    return (C)((D)x / (D)k);
  } else {
    return (C)(x / (C)k);
  }
}

/* ---- Datatypes: S is stored, C is computed on -------------------------------------- */

template <typename T>
struct Plain { /* integers, float, double */
  using S = T;
  using C = T;
  static __device__ __forceinline__ C widen(S s) { return s; }
  static __device__ __forceinline__ S narrow(C c) { return c; }
};
struct Half {
  using S = uint16_t;
  using C = float;
  static __device__ __forceinline__ C widen(S s) { return half_to_float(s); }
  static __device__ __forceinline__ S narrow(C c) { return float_to_half(c); }
};
struct Bf16 {
  using S = uint16_t;
  using C = float;
  static __device__ __forceinline__ C widen(S s) { return bf16_to_float(s); }
  static __device__ __forceinline__ S narrow(C c) { return float_to_bf16(c); }
};

/* One stored element op another, rounded back to the datatype: weft__reduce's element. */
template <typename K, int OP>
__device__ __forceinline__ typename K::S reduce_one(typename K::S a, typename K::S b) {
  return K::narrow(combine<OP>(K::widen(a), K::widen(b)));
}

template <typename K>
__device__ __forceinline__ typename K::S avg_one(typename K::S x, int k) {
  return K::narrow(divide(K::widen(x), k));
}

/* 16 bytes of elements, moved as one load / store (the pointer is 16-byte aligned). */
template <typename S>
union Vec {
  static constexpr int W = 16 / sizeof(S);
  uint4 raw;
  S e[W];
};
template <typename S>
__device__ __forceinline__ Vec<S> load16(const S *p) {
  Vec<S> v;
  v.raw = *reinterpret_cast<const uint4 *>(p);
  return v;
}
template <typename S>
__device__ __forceinline__ void store16(S *p, const Vec<S> &v) {
  *reinterpret_cast<uint4 *>(p) = v.raw;
}

/* ---- The operations, as functors of one element and of one vector ----------------- */
/* Each reads every input of an element before writing any output, so an output may be
 * exactly an input. */

template <typename K, int OP>
struct ReduceF {
  using S = typename K::S;
  static constexpr int W = Vec<S>::W;
  S *d;
  const S *a, *b;
  __device__ void one(size_t i) const { d[i] = reduce_one<K, OP>(a[i], b[i]); }
  __device__ void vec(size_t i) const {
    Vec<S> x = load16(a + i), y = load16(b + i);
#pragma unroll
    for (int e = 0; e < W; e++) x.e[e] = reduce_one<K, OP>(x.e[e], y.e[e]);
    store16(d + i, x);
  }
};

template <typename K>
struct AvgF {
  using S = typename K::S;
  static constexpr int W = Vec<S>::W;
  S *p;
  int k;
  __device__ void one(size_t i) const { p[i] = avg_one<K>(p[i], k); }
  __device__ void vec(size_t i) const {
    Vec<S> x = load16(p + i);
#pragma unroll
    for (int e = 0; e < W; e++) x.e[e] = avg_one<K>(x.e[e], k);
    store16(p + i, x);
  }
};

/* The pointer arrays travel by value in the kernel parameter (2 x 8 pointers). */
template <typename K, int OP>
struct FanoutF {
  using S = typename K::S;
  static constexpr int W = Vec<S>::W;
  const S *in[WEFT__CUDA_FANOUT_MAX];
  S *out[WEFT__CUDA_FANOUT_MAX];
  int nin, nout, avg; /* avg: divide the fold by nin (WEFT_AVG, folded as OP = sum) */
  __device__ void one(size_t i) const {
    S acc = in[0][i];
    for (int k = 1; k < nin; k++) acc = reduce_one<K, OP>(acc, in[k][i]);
    if (avg) acc = avg_one<K>(acc, nin);
    for (int j = 0; j < nout; j++) out[j][i] = acc;
  }
  __device__ void vec(size_t i) const {
    Vec<S> acc = load16(in[0] + i);
    for (int k = 1; k < nin; k++) {
      Vec<S> v = load16(in[k] + i);
#pragma unroll
      for (int e = 0; e < W; e++) acc.e[e] = reduce_one<K, OP>(acc.e[e], v.e[e]);
    }
    if (avg) {
#pragma unroll
      for (int e = 0; e < W; e++) acc.e[e] = avg_one<K>(acc.e[e], nin);
    }
    for (int j = 0; j < nout; j++) store16(out[j] + i, acc);
  }
};

/* ---- The kernel and its launch ------------------------------------------------------ */

constexpr int kThreads = 256;

/* Elements [head, head + nvec * W) as vectors, the rest ([0, head) and the tail after
 * the vectors) one by one; both loops stride over the whole grid. */
template <typename F>
__global__ void __launch_bounds__(kThreads) elementwise(F f, size_t n, size_t head, size_t nvec,
                                                        const volatile unsigned *gate) {
  if (gate != nullptr) { /* one read per block; the same outcome for every thread */
    __shared__ unsigned open;
    if (threadIdx.x == 0) open = *gate;
    __syncthreads();
    if (open == 0) return;
  }
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t v = tid; v < nvec; v += stride) f.vec(head + v * F::W);
  size_t tail = head + nvec * F::W, nscalar = head + (n - tail);
  for (size_t s = tid; s < nscalar; s += stride) f.one(s < head ? s : tail + (s - head));
}

/* Multiprocessors of each device, asked once (the launch path then makes no query). */
constexpr int kMaxDevices = 64;
std::atomic<int> sm_count[kMaxDevices];

int multiprocessors(int *sms) {
  int dev;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev >= 0 && dev < kMaxDevices && (*sms = sm_count[dev].load(std::memory_order_relaxed)) > 0) return 0;
  e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return e;
  if (dev >= 0 && dev < kMaxDevices) sm_count[dev].store(*sms, std::memory_order_relaxed);
  return 0;
}

/* Blocks of one kernel resident per multiprocessor, asked once per kernel (a function-
 * local static of the template: C++ makes its initialization thread-safe). All devices
 * of a node are assumed to be of one architecture. */
template <typename F>
int blocks_per_sm() {
  static const int per_sm = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, elementwise<F>, kThreads, 0) != cudaSuccess ||
        b < 1) {
      cudaGetLastError(); /* clear it: the launch reports any real failure */
      b = 2048 / kThreads;
    }
    return b;
  }();
  return per_sm;
}

/* Where the vectors start: every pointer of the call at one address mod 16, a multiple
 * of the element size. Otherwise no vectors (head = n). */
size_t vector_head(const void *const *p, int np, size_t elem, size_t n) {
  uintptr_t off = (uintptr_t)p[0] & 15;
  for (int i = 1; i < np; i++)
    if (((uintptr_t)p[i] & 15) != off) return n;
  if (off % elem != 0) return n;
  size_t head = off ? (16 - off) / elem : 0;
  return head < n ? head : n;
}

template <typename F>
int launch(const F &f, size_t n, const void *const *ptrs, int nptrs, void *stream,
           const volatile unsigned *gate = nullptr) {
  if (n == 0) return 0;
  size_t head = vector_head(ptrs, nptrs, sizeof(typename F::S), n);
  size_t nvec = (n - head) / F::W;
  size_t items = nvec + head + (n - head - nvec * F::W); /* what the grid strides over */
  int sms;
  int e = multiprocessors(&sms);
  if (e) return e;
  size_t want = (items + kThreads - 1) / kThreads;
  size_t fit = (size_t)sms * (size_t)blocks_per_sm<F>();
  unsigned blocks = (unsigned)(want < fit ? want : fit);
  elementwise<F><<<blocks, kThreads, 0, (cudaStream_t)stream>>>(f, n, head, nvec, gate);
  return (int)cudaGetLastError();
}

/* ---- Dispatch on datatype and op ---------------------------------------------------- */

/* Calls fn.template run<K>() with the datatype's K, or returns cudaErrorInvalidValue. */
template <typename Fn>
int with_datatype(weft_datatype_t dt, Fn &&fn) {
  switch (dt) {
    case WEFT_INT8: return fn(Plain<int8_t>{});
    case WEFT_UINT8: return fn(Plain<uint8_t>{});
    case WEFT_INT32: return fn(Plain<int32_t>{});
    case WEFT_UINT32: return fn(Plain<uint32_t>{});
    case WEFT_INT64: return fn(Plain<int64_t>{});
    case WEFT_UINT64: return fn(Plain<uint64_t>{});
    case WEFT_FLOAT16: return fn(Half{});
    case WEFT_FLOAT32: return fn(Plain<float>{});
    case WEFT_FLOAT64: return fn(Plain<double>{});
    case WEFT_BFLOAT16: return fn(Bf16{});
    default: return cudaErrorInvalidValue;
  }
}

/* The same for the op (WEFT_AVG reduces as sum), as a compile-time constant. */
template <typename Fn>
int with_op(weft_redop_t op, Fn &&fn) {
  switch (op) {
    case WEFT_SUM:
    case WEFT_AVG: return fn(std::integral_constant<int, WEFT_SUM>{});
    case WEFT_PROD: return fn(std::integral_constant<int, WEFT_PROD>{});
    case WEFT_MAX: return fn(std::integral_constant<int, WEFT_MAX>{});
    case WEFT_MIN: return fn(std::integral_constant<int, WEFT_MIN>{});
    default: return cudaErrorInvalidValue;
  }
}

} /* namespace weft_cuda */

using namespace weft_cuda;

extern "C" int weft__cuda_reduce(void *dst, const void *a, const void *b, size_t count, weft_datatype_t dt,
                                 weft_redop_t op, void *stream) {
  return with_datatype(dt, [&](auto k) {
    using K = decltype(k);
    using S = typename K::S;
    return with_op(op, [&](auto o) {
      ReduceF<K, decltype(o)::value> f{(S *)dst, (const S *)a, (const S *)b};
      const void *ptrs[3] = {dst, a, b};
      return launch(f, count, ptrs, 3, stream);
    });
  });
}

extern "C" int weft__cuda_avg(void *buf, size_t count, weft_datatype_t dt, int divisor, void *stream) {
  if (divisor <= 1) return 0; /* dividing by 1 changes nothing; < 1 is a caller bug */
  return with_datatype(dt, [&](auto k) {
    using K = decltype(k);
    AvgF<K> f{(typename K::S *)buf, divisor};
    const void *ptrs[1] = {buf};
    return launch(f, count, ptrs, 1, stream);
  });
}

/* Both fan-out entries: nin >= 1 (1: a copy into every output), gate as
 * weft__cuda_fanout_gated's (NULL: none). */
static int fanout(char *const *out, int nout, char *const *in, int nin, size_t count, weft_datatype_t dt,
                  weft_redop_t op, const volatile unsigned *gate, void *stream) {
  if (nin < 1 || nin > WEFT__CUDA_FANOUT_MAX || nout < 1 || nout > WEFT__CUDA_FANOUT_MAX)
    return cudaErrorInvalidValue;
  return with_datatype(dt, [&](auto k) {
    using K = decltype(k);
    using S = typename K::S;
    return with_op(op, [&](auto o) {
      FanoutF<K, decltype(o)::value> f{};
      const void *ptrs[2 * WEFT__CUDA_FANOUT_MAX];
      for (int i = 0; i < nin; i++) f.in[i] = (const S *)(ptrs[i] = in[i]);
      for (int j = 0; j < nout; j++) f.out[j] = (S *)(ptrs[nin + j] = out[j]);
      f.nin = nin;
      f.nout = nout;
      f.avg = op == WEFT_AVG;
      return launch(f, count, ptrs, nin + nout, stream, gate);
    });
  });
}

extern "C" int weft__cuda_reduce_fanout(char *const *out, int nout, char *const *in, int nin, size_t count,
                                        weft_datatype_t dt, weft_redop_t op, void *stream) {
  if (nin < 2) return cudaErrorInvalidValue;
  return fanout(out, nout, in, nin, count, dt, op, nullptr, stream);
}

extern "C" int weft__cuda_fanout_gated(char *const *out, int nout, char *const *in, int nin, size_t count,
                                       weft_datatype_t dt, weft_redop_t op, const volatile unsigned *gate,
                                       void *stream) {
  if (gate == nullptr) return cudaErrorInvalidValue;
  return fanout(out, nout, in, nin, count, dt, op, gate, stream);
}

/* Loads every kernel above into the current device's context: cudaFuncGetAttributes makes
 * CUDA load a kernel that lazy loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA
 * 12.2) would otherwise load at its first launch, and loading waits for every stream of the
 * context to drain. A first launch while a CUDA stream of the process sits in weft's stream
 * wait for that very call therefore never returned (seen on the H200: the direct path's
 * kernels, in cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags). NCCL loads its kernels
 * at init for the same reason (ncclInitKernelsForDevice; no code taken). */
template <typename F>
static int load_one(int e) {
  cudaFuncAttributes a;
  if (e != 0) return e;
  e = (int)cudaFuncGetAttributes(&a, elementwise<F>);
  if (e == 0) (void)blocks_per_sm<F>(); /* and its occupancy, asked now rather than at a launch */
  return e;
}

extern "C" int weft__cuda_kernels_load(void) {
  static const weft_datatype_t dts[] = {WEFT_INT8,   WEFT_UINT8,   WEFT_INT32,   WEFT_UINT32,  WEFT_INT64,
                                        WEFT_UINT64, WEFT_FLOAT16, WEFT_FLOAT32, WEFT_FLOAT64, WEFT_BFLOAT16};
  static const weft_redop_t ops[] = {WEFT_SUM, WEFT_PROD, WEFT_MAX, WEFT_MIN};
  int e = 0;
  for (size_t d = 0; d < sizeof dts / sizeof dts[0] && e == 0; d++) {
    e = with_datatype(dts[d], [](auto k) { return load_one<AvgF<decltype(k)>>(0); });
    for (size_t o = 0; o < sizeof ops / sizeof ops[0] && e == 0; o++)
      e = with_datatype(dts[d], [&](auto k) {
        using K = decltype(k);
        return with_op(ops[o], [](auto op) {
          return load_one<FanoutF<K, decltype(op)::value>>(load_one<ReduceF<K, decltype(op)::value>>(0));
        });
      });
  }
  if (e != 0) cudaGetLastError();
  return e;
}

/* nccl_kernels.cu: the one kernel of libnccl.so.2 (nccl/nccl_cuda.c): a PreMulSum op's
 * input scaled on the device, dst[i] = src[i] * scalar, in the caller's stream. The scalar is
 * read on the device (ncclScalarDevice on device memory) or passed by value. Its bits are
 * nccl_premul.c's host scaling: integers wrap (unsigned arithmetic), floats multiply with
 * round-to-nearest-even (_rn: no FMA contraction), fp16 / bf16 widen to fp32 and round back
 * with mem/cuda_half.cuh (the host's half.c bits). */
#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>
#include "mem/cuda_half.cuh"

namespace {

using namespace weft_cuda;

enum { I8 = 0, U8 = 1, I32 = 2, U32 = 3, I64 = 4, U64 = 5, F16 = 6, F32 = 7, F64 = 8, BF16 = 9 };

template <typename T> struct mul {
  __device__ static T run(T a, T s) { return (T)(a * s); }
};
template <> struct mul<float> {
  __device__ static float run(float a, float s) { return __fmul_rn(a, s); }
};
template <> struct mul<double> {
  __device__ static double run(double a, double s) { return __dmul_rn(a, s); }
};

template <typename T>
__global__ void scale_kernel(T *dst, const T *src, size_t n, const T *sdev, T shost) {
  T s = sdev != nullptr ? *sdev : shost;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = mul<T>::run(src[i], s);
}

/* fp16 (bf = 0) or bf16 (bf = 1), scaled in fp32. */
__global__ void scale_half_kernel(uint16_t *dst, const uint16_t *src, size_t n, const uint16_t *sdev,
                                  uint16_t shost, int bf) {
  uint16_t sb = sdev != nullptr ? *sdev : shost;
  float s = bf ? bf16_to_float(sb) : half_to_float(sb);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float v = __fmul_rn(bf ? bf16_to_float(src[i]) : half_to_float(src[i]), s);
    dst[i] = bf ? float_to_bf16(v) : float_to_half(v);
  }
}

template <typename T>
void launch(void *dst, const void *src, size_t n, const void *sdev, const void *shost, cudaStream_t st) {
  T sv{};
  if (shost != nullptr) memcpy(&sv, shost, sizeof sv);
  unsigned blocks = (unsigned)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
  scale_kernel<T><<<blocks ? blocks : 1, 256, 0, st>>>((T *)dst, (const T *)src, n, (const T *)sdev, sv);
}

}  // namespace

extern "C" int weft__nccl_scale(void *dst, const void *src, size_t n, int dt, const void *sdev,
                                const void *shost, cudaStream_t st) {
  switch (dt) {
    case I8: case U8: launch<uint8_t>(dst, src, n, sdev, shost, st); break;
    case I32: case U32: launch<uint32_t>(dst, src, n, sdev, shost, st); break;
    case I64: case U64: launch<uint64_t>(dst, src, n, sdev, shost, st); break;
    case F32: launch<float>(dst, src, n, sdev, shost, st); break;
    case F64: launch<double>(dst, src, n, sdev, shost, st); break;
    case F16: case BF16: {
      uint16_t sv = 0;
      if (shost != nullptr) memcpy(&sv, shost, sizeof sv);
      unsigned blocks = (unsigned)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
      scale_half_kernel<<<blocks ? blocks : 1, 256, 0, st>>>((uint16_t *)dst, (const uint16_t *)src, n,
                                                            (const uint16_t *)sdev, sv, dt == BF16);
      break;
    }
    default: return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}

/* Loads the kernels above into the current device's context now rather than at their first
 * launch (lazy loading waits for the whole context to drain, so a first launch while
 * another rank's stream of this process waits on weft would wait for this rank's own call:
 * see weft__cuda_kernels_load in mem/cuda_kernels.h). */
extern "C" int weft__nccl_kernels_load(void) {
  cudaFuncAttributes a;
  cudaError_t e = cudaFuncGetAttributes(&a, scale_kernel<uint8_t>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, scale_kernel<uint32_t>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, scale_kernel<uint64_t>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, scale_kernel<float>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, scale_kernel<double>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, scale_half_kernel);
  if (e != cudaSuccess) cudaGetLastError();
  return (int)e;
}


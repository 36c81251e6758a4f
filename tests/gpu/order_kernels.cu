// order_kernels.cu: kernels of tests/gpu/test_cuda_collectives.c's stream-order checks,
// behind a C interface. slow_fill writes its value only after spinning for `spin` clock
// cycles, so a collective that did not wait for it would read the old contents; copy_out
// reads the collective's output, so one that had not finished would leave old bytes.
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void slow_fill_kernel(float *buf, size_t count, float value, long long spin) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    long long start = clock64();
    while (clock64() - start < spin) {
    }
  }
  __syncthreads();
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
    buf[i] = value;
}

__global__ void copy_out_kernel(float *dst, const float *src, size_t count) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

extern "C" int test_slow_fill(float *buf, size_t count, float value, long long spin, void *stream) {
  // One block spins, the others wait at nothing: the whole grid is one block so the spin
  // delays every write.
  slow_fill_kernel<<<1, 256, 0, (cudaStream_t)stream>>>(buf, count, value, spin);
  return (int)cudaGetLastError();
}

extern "C" int test_copy_out(float *dst, const float *src, size_t count, void *stream) {
  copy_out_kernel<<<64, 256, 0, (cudaStream_t)stream>>>(dst, src, count);
  return (int)cudaGetLastError();
}

// Loads both kernels now (cudaFuncGetAttributes), as a program must whose first launch of a
// kernel may come while one of its streams waits on weft: lazy loading (CUDA's default)
// waits for the whole context to drain (mem/cuda_kernels.h). WEFT_GPU_TEST_LAZY=1 skips it
// in the tests, to see whether that hazard bites.
extern "C" int test_order_kernels_load(void) {
  cudaFuncAttributes a;
  cudaError_t e = cudaFuncGetAttributes(&a, slow_fill_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, copy_out_kernel);
  return (int)e;
}


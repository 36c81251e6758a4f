/* nccl_tests_nccl.h: the nccl.h that tests/gpu/nccl_tests_build.sh puts in front of NVIDIA's
 * nccl-tests: weft's nccl.h (copied beside it as weft_nccl.h) at NCCL 2.27's API level.
 * nccl-tests compiles its NCCL 2.28 paths (nccl_device.h, ncclDevComm and the device-API
 * kernels of all_reduce and alltoall, used only with -D) when NCCL_VERSION_CODE >= 2.28;
 * weft has NCCL 2.28's host API but not its device API, so those paths are compiled out,
 * as against a real NCCL 2.27. And, as NCCL's own nccl.h does (weft's needs no CUDA header),
 * it includes cuda_runtime.h, cuda_fp16.h and cuda_bf16.h, whose half and bfloat16 types
 * nccl-tests uses without including them. Nothing else changes: the same declarations, the
 * same library (ncclGetVersion still reports 2.28.9 at run time). */
#ifndef WEFT_NCCL_TESTS_NCCL_H
#define WEFT_NCCL_TESTS_NCCL_H
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "weft_nccl.h"
#undef NCCL_MINOR
#undef NCCL_PATCH
#undef NCCL_VERSION_CODE
#define NCCL_MINOR 27
#define NCCL_PATCH 0
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)
#endif

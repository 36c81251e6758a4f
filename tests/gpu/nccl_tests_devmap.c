/* nccl_tests_devmap.c: an LD_PRELOAD shim that lets NVIDIA's nccl-tests run several ranks on
 * one GPU (tests/gpu/nccl_tests.sh). nccl-tests' threads mode (-t N -g 1) gives thread i the
 * device NCCL_TESTS_DEVICE + i and checks it against cudaGetDeviceCount; on a machine with
 * one GPU, device 1 does not exist. With this shim preloaded into nccl-tests linked to the
 * shared CUDA runtime (nvcc -cudart shared):
 *   - cudaGetDeviceCount reports max(real count, WEFT_DEVMAP_DEVICES);
 *   - a device ordinal d given to cudaSetDevice, cudaDeviceGetAttribute,
 *     cudaGetDeviceProperties, cudaDeviceGetPCIBusId or cudaDeviceCanAccessPeer becomes
 *     d mod the real count.
 *   - cudaDeviceSynchronize synchronizes the calling thread's default streams (legacy and
 *     per-thread) instead of the whole device. nccl-tests calls it after filling its buffers
 *     and after checking them (work it queues on the default stream). With the ranks'
 *     threads sharing one device, and so one CUDA context, a whole-device wait would also
 *     wait for the other rank's stream, which waits for this rank's next call inside the
 *     collective library: every run hung at its first size (seen on the H200, weft's
 *     library; NVIDIA's refuses two ranks on one device). A rank on a device of its own, as
 *     nccl-tests assumes, waits for nothing else either way.
 * Only the program's own calls go through it: libnccl.so.2 (weft) links its CUDA runtime
 * statically and never sees it. The ranks then share the GPU as weft's own GPU tests' ranks
 * do. Built by nccl_tests.sh as a shared library (cc -shared -fPIC ... -ldl). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef int cuda_err; /* cudaError_t: an enum, passed as int */
struct cudaDeviceProp;

static cuda_err (*real_count)(int *);
static cuda_err (*real_set)(int);
static cuda_err (*real_attr)(int *, int, int);
static cuda_err (*real_props)(struct cudaDeviceProp *, int);
static cuda_err (*real_busid)(char *, int, int);
static cuda_err (*real_peer)(int *, int, int);
static cuda_err (*real_stream_sync)(void *);
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ndev = -1; /* the real count, once known */

static void resolve(void) {
  real_count = (cuda_err(*)(int *))dlsym(RTLD_NEXT, "cudaGetDeviceCount");
  real_set = (cuda_err(*)(int))dlsym(RTLD_NEXT, "cudaSetDevice");
  real_attr = (cuda_err(*)(int *, int, int))dlsym(RTLD_NEXT, "cudaDeviceGetAttribute");
  real_props = (cuda_err(*)(struct cudaDeviceProp *, int))dlsym(RTLD_NEXT, "cudaGetDeviceProperties");
  real_busid = (cuda_err(*)(char *, int, int))dlsym(RTLD_NEXT, "cudaDeviceGetPCIBusId");
  real_peer = (cuda_err(*)(int *, int, int))dlsym(RTLD_NEXT, "cudaDeviceCanAccessPeer");
  real_stream_sync = (cuda_err(*)(void *))dlsym(RTLD_NEXT, "cudaStreamSynchronize");
  if (real_count == NULL || real_set == NULL) {
    fprintf(stderr, "nccl_tests_devmap: the CUDA runtime is not a shared library here (link with -cudart shared)\n");
    abort();
  }
  int n = 0;
  if (real_count(&n) == 0 && n > 0) ndev = n;
  if (getenv("WEFT_DEVMAP_TRACE") != NULL) fprintf(stderr, "nccl_tests_devmap: %d real device(s)\n", ndev);
}

static int map(int d) {
  pthread_once(&once, resolve);
  return ndev > 0 && d >= 0 ? d % ndev : d;
}

cuda_err cudaGetDeviceCount(int *count) {
  pthread_once(&once, resolve);
  cuda_err e = real_count(count);
  const char *want = getenv("WEFT_DEVMAP_DEVICES");
  if (e == 0 && *count > 0 && want != NULL && atoi(want) > *count) *count = atoi(want);
  return e;
}

cuda_err cudaSetDevice(int d) {
  int m = map(d);
  return real_set(m);
}
cuda_err cudaDeviceGetAttribute(int *v, int attr, int d) { return (void)map(0), real_attr(v, attr, map(d)); }
cuda_err cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) { return (void)map(0), real_props(p, map(d)); }
cuda_err cudaDeviceGetPCIBusId(char *id, int len, int d) { return (void)map(0), real_busid(id, len, map(d)); }
cuda_err cudaDeviceCanAccessPeer(int *can, int d, int peer) { return (void)map(0), real_peer(can, map(d), map(peer)); }

/* cudaStreamLegacy and cudaStreamPerThread, as cuda_runtime_api.h defines them */
#define LEGACY_STREAM ((void *)0x1)
#define PER_THREAD_STREAM ((void *)0x2)

cuda_err cudaDeviceSynchronize(void) {
  pthread_once(&once, resolve);
  if (real_stream_sync == NULL) {
    fprintf(stderr, "nccl_tests_devmap: no cudaStreamSynchronize in the CUDA runtime\n");
    abort();
  }
  cuda_err e = real_stream_sync(LEGACY_STREAM);
  return e != 0 ? e : real_stream_sync(PER_THREAD_STREAM);
}


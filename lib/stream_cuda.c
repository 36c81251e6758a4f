/* stream_cuda.c: weft streams bound to CUDA streams, and calls on device buffers (the design
 * is in lib/stream_cuda.h; the public side is include/weft_cuda.h).
 *
 * Ordering, per call on a bound stream (the caller's thread, in weft__cuda_enqueue):
 *   1. staged calls: cudaMemcpyAsync of the device input into pinned host memory (a slot),
 *      on the CUDA stream;
 *   2. cudaEventRecord(ev_in): the progress thread starts the call once the event fired,
 *      so everything queued on the stream before the call has finished;
 *   3. cuStreamWaitValue32 on the binding's pinned word: the CUDA stream waits until the
 *      thread has written this call's ticket there (after the call ended, even on error);
 *   4. staged calls: cudaMemcpyAsync of the result back into the device buffers;
 *   5. cudaEventRecord(ev_out): the slot's host memory is free again once it fired;
 *   6. the call goes to the weft stream's queue (its thread runs it: weft__task_run), last,
 *      so that the caller touches nothing of it once the thread may have run and freed it.
 * Nothing in a kernel waits for another process, so several ranks may share one GPU
 * without MPS. The stream memory operation is what NCCL's proxy uses for host-driven
 * transports too; no code taken.
 *
 * By default every call on device buffers is staged: weft's host algorithms run on the
 * pinned mirrors, over shared memory or TCP, so device buffers reach every transport.
 * Reading and writing peers' device buffers in place through CUDA IPC (the direct
 * algorithms on the device space, buffers in registered windows) is the faster path on one
 * host; it is off unless WEFT_CUDA_DIRECT is set: on the H200 its first call hung, a kernel's
 * lazy load waiting for the caller's stream, which waited for that call. The binding now
 * loads weft's kernels first (binding_new); that is not yet run on a GPU.
 *
 * Staging: the buffers a call reads and writes on this rank (its "extents", by collective)
 * get mirrors in the slot's pinned memory; a buffer inside another (in-place calls) shares
 * its mirror at the same offset, so the host algorithms see the same aliasing as the
 * caller's. Only the ranges the call writes on this rank go back, so a buffer the call does
 * not write (a non-root's reduce output, say) is never overwritten.
 *
 * WEFT_CUDA_TRACE=1 times every call's steps (host clock and CUDA events), and each stream
 * prints, when destroyed, the medians per run of calls of one collective and size (see
 * "tracing" below). It located the small-call latency of ranks sharing one GPU: on the
 * H200 an 8 B call took 26.6-27.6 us with 1 rank but 276-340 us with 2 (553 with 4), and
 * none of it was in weft's own steps (the thread ran each call within microseconds of the
 * GPU reaching it): each rank's GPU work waited for the other process's context to leave
 * the GPU while that context's stream sat in its stream wait. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "weft.h"
#include "weft_cuda.h"
#include "lib/algo.h"
#include "lib/clock.h"
#include "lib/comm.h"
#include "lib/dtype.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/status.h"
#include "lib/stream.h"
#include "lib/stream_cuda.h"
#include "lib/task.h"
#include "lib/window.h"
#include "mem/cuda.h"
#include "mem/cuda_kernels.h"
#include "mem/space.h"

#define NSLOTS 16 /* calls in flight per bound stream before enqueue waits for the oldest */

typedef CUresult (*pfn_wait32)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
static pfn_wait32 drv_wait32;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static int trace_on; /* WEFT_CUDA_TRACE */
static int direct_mode; /* WEFT_CUDA_DIRECT: 0 (default) stage every call; see runs_direct */

#define KERNELS_DEVICES 64
static atomic_int kernels_loaded[KERNELS_DEVICES]; /* weft__cuda_kernels_load ran on that device */
static pthread_mutex_t kernels_mu = PTHREAD_MUTEX_INITIALIZER;

static void load_driver(void) {
  drv_wait32 = (pfn_wait32)weft__cuda_driver_entry("cuStreamWaitValue32");
  trace_on = weft__env_long("WEFT_CUDA_TRACE", 0) != 0;
  direct_mode = (int)weft__env_long("WEFT_CUDA_DIRECT", 0);
}

/* One call's steps (tracing): host CLOCK_MONOTONIC ns, and the GPU's times in ms between
 * the call's events: its first one (before the input copies) -> ev_in -> after the stream
 * wait -> ev_out. */
typedef struct {
  int valid, rank, coll, rounds;
  size_t bytes;
  uint64_t enq_entry, enq_queued, enq_return; /* the enqueue: entry, queued for the thread, return */
  uint64_t taken, input_seen, ticket_stored;   /* the thread: took the call, saw ev_in, stored the ticket */
  float g_in, g_wait, g_out;
} trace_rec;
#define TRACE_CAP 8192 /* calls kept per stream; later ones are not traced */

typedef struct {
  char *host;       /* pinned staging memory (cudaHostAlloc), NULL until a staged call needs it */
  size_t bytes;
  cudaEvent_t ev_in, ev_out;
  cudaEvent_t ev_kernels;   /* WEFT_CUDA_DIRECT=2: after the call's kernels on the caller's stream */
  volatile unsigned *gate;  /* ... which run only once the thread opened it (mapped pinned memory) */
  unsigned *gate_dev;       /* the same word as the GPU reaches it */
  int used;         /* ev_out was recorded: wait for it before reusing the slot */
  cudaEvent_t ev_start, ev_waited; /* tracing only */
  trace_rec tr;
} slot;

struct weft__cuda_binding {
  cudaStream_t user;         /* the caller's CUDA stream */
  cudaStream_t work;         /* the thread's own (direct calls' copies and kernels), made up front */
  int device;
  uint32_t *done;            /* pinned: the ticket of the last call the thread finished */
  CUdeviceptr done_dev;      /* the same word as the GPU reaches it */
  pthread_mutex_t mu;        /* enqueue order = CUDA order = queue order */
  uint32_t issued;           /* tickets handed out */
  slot slots[NSLOTS];
  trace_rec *log;            /* tracing: complete calls in ticket order */
  int nlog;
  /* Staging memory a slot outgrew, freed once no call of the process is waited for
   * (free_retired) or with the binding: cudaFreeHost waits while any stream of the process
   * sits in a stream wait (tests/gpu/cuda_wait_probe on the H200), and with several ranks in
   * one process (libnccl.so.2's threads) another rank's stream may wait for the very call
   * this enqueue is making, so freeing it in the enqueue could never return. */
  char **retired;
  int nretired, cap_retired;
};

/* One device-to-host or host-to-device copy of a staged call. */
typedef struct {
  void *dev;
  char *host;
  size_t bytes;
} xfer;

/* A call's state, freed with the task (t->device_call). */
typedef struct {
  uint32_t ticket;
  slot *sl;
  int staged;
  /* WEFT_CUDA_DIRECT=2 (queued_direct): the call's kernels wait on the caller's stream for
   * ticket `go`; they were queued for every rank's buffers at these addresses. */
  int queued_direct;
  int counted;    /* in waits_pending until the thread stores the done ticket */
  uint32_t go;
  struct weft__cuda_binding *b;
  char *assumed_in[WEFT__CUDA_FANOUT_MAX], *assumed_out[WEFT__CUDA_FANOUT_MAX];
  int nin, nout;
  xfer *in, *out; /* into the trailing array */
  xfer all[];
} device_call;

static weft_status_t cuda_err(struct weft_comm *comm, cudaError_t e, const char *what) {
  cudaGetLastError();
  weft_status_t st = e == cudaErrorMemoryAllocation ? WEFT_ERR_NO_MEMORY : WEFT_ERR_SYSTEM;
  if (comm == NULL) return weft__error(NULL, st, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return weft__error(comm, st, "rank %d: %s: %s (%s)", comm->rank, what, cudaGetErrorString(e), cudaGetErrorName(e));
}
#define CUDA_TRY(comm, call, what)                  \
  do {                                              \
    cudaError_t e_ = (call);                        \
    if (e_ != cudaSuccess) return cuda_err(comm, e_, what); \
  } while (0)

/* ---- tracing (WEFT_CUDA_TRACE) ------------------------------------------------------------ */

/* The slot's last call is complete (its ev_out was waited for): its record joins the log. */
static void harvest(struct weft__cuda_binding *b, slot *s) {
  if (!s->tr.valid || b->log == NULL) return;
  s->tr.valid = 0;
  if (s->tr.input_seen == 0 || s->tr.ticket_stored == 0) return; /* failed before it ran */
  if (cudaEventElapsedTime(&s->tr.g_in, s->ev_start, s->ev_in) != cudaSuccess ||
      cudaEventElapsedTime(&s->tr.g_wait, s->ev_in, s->ev_waited) != cudaSuccess ||
      cudaEventElapsedTime(&s->tr.g_out, s->ev_waited, s->ev_out) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  if (b->nlog < TRACE_CAP) b->log[b->nlog++] = s->tr;
}

static int cmp_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}

static uint64_t diff(uint64_t later, uint64_t earlier) { return later > earlier ? later - earlier : 0; }

/* To stderr, per run of consecutive calls of one collective and size (a benchmark's warm-up
 * and timed calls), the medians in us of its last 11 calls: enq the enqueue; deq queued ->
 * taken by the thread; evin taken -> ev_in seen (polls: cudaEventQuery calls); run the host
 * collective; gpu in/wait/out the GPU's time from the call's first event to ev_in, from
 * ev_in to passing the stream wait, from there to ev_out; lag the bounds of how long after
 * the ticket's store the GPU passed the wait; next the ticket's store -> the next enqueue. */
static void trace_print(const struct weft__cuda_binding *b) {
  enum { K = 11, M = 11 };
  for (int i = 0, j; i < b->nlog; i = j) {
    for (j = i; j < b->nlog && b->log[j].coll == b->log[i].coll && b->log[j].bytes == b->log[i].bytes;) j++;
    int lo = j - K > i ? j - K : i, n = j - lo;
    uint64_t v[M][K];
    for (int k = 0; k < n; k++) {
      const trace_rec *r = &b->log[lo + k];
      uint64_t gi = (uint64_t)(r->g_in * 1e6), gw = (uint64_t)(r->g_wait * 1e6), go = (uint64_t)(r->g_out * 1e6);
      v[0][k] = diff(r->enq_return, r->enq_entry);
      v[1][k] = diff(r->taken, r->enq_queued);
      v[2][k] = diff(r->input_seen, r->taken);
      v[3][k] = (uint64_t)r->rounds * 1000;
      v[4][k] = diff(r->ticket_stored, r->input_seen);
      v[5][k] = gi;
      v[6][k] = gw;
      v[7][k] = go;
      /* ev_in ran between the enqueue's entry and the thread seeing it, so the GPU passed
       * the wait gw - (stored - entry) at least and gw - (stored - seen) at most after the store */
      v[8][k] = diff(gw, diff(r->ticket_stored, r->enq_entry));
      v[9][k] = diff(gw, diff(r->ticket_stored, r->input_seen));
      v[10][k] = lo + k + 1 < b->nlog ? diff(b->log[lo + k + 1].enq_entry, r->ticket_stored) : 0;
    }
    double med[M];
    for (int m = 0; m < M; m++) {
      qsort(v[m], (size_t)n, sizeof(uint64_t), cmp_u64);
      med[m] = (double)v[m][n / 2] / 1e3;
    }
    fprintf(stderr, "# weft cuda trace: rank %d %s %zu B, %d calls: enq %.1f deq %.1f evin %.1f (%.0f polls) "
            "run %.1f | gpu in %.1f wait %.1f out %.1f | lag %.1f..%.1f | next %.1f us\n", b->log[i].rank,
            weft__coll_name((weft__coll_t)b->log[i].coll), b->log[i].bytes, n, med[0], med[1], med[2], med[3],
            med[4], med[5], med[6], med[7], med[8], med[9], med[10]);
  }
}

/* ---- bindings ---------------------------------------------------------------------------- */

static void binding_free(struct weft__cuda_binding *b) {
  if (b == NULL) return;
  if (b->log != NULL) {
    for (uint32_t k = 1; k <= NSLOTS; k++) { /* oldest call first: the log stays in ticket order */
      slot *s = &b->slots[(b->issued + k) % NSLOTS];
      if (s->used && cudaEventSynchronize(s->ev_out) == cudaSuccess) harvest(b, s);
    }
    trace_print(b);
    free(b->log);
  }
  for (int i = 0; i < NSLOTS; i++) {
    slot *s = &b->slots[i];
    if (s->ev_start != NULL) cudaEventDestroy(s->ev_start);
    if (s->ev_waited != NULL) cudaEventDestroy(s->ev_waited);
    if (s->used) cudaEventSynchronize(s->ev_out);
    if (s->host != NULL) cudaFreeHost(s->host);
    if (s->ev_in != NULL) cudaEventDestroy(s->ev_in);
    if (s->ev_out != NULL) cudaEventDestroy(s->ev_out);
    if (s->ev_kernels != NULL) cudaEventDestroy(s->ev_kernels);
  }
  if (b->work != NULL) cudaStreamDestroy(b->work);
  for (int i = 0; i < b->nretired; i++) cudaFreeHost(b->retired[i]);
  free(b->retired);
  if (b->done != NULL) cudaFreeHost(b->done);
  pthread_mutex_destroy(&b->mu);
  cudaGetLastError();
  free(b);
}

void weft__cuda_binding_free(struct weft__cuda_binding *b) { binding_free(b); }

static weft_status_t binding_new(cudaStream_t user, struct weft__cuda_binding **out) {
  char why[160];
  if (!weft__cuda_usable(why, sizeof why))
    return weft__error(NULL, WEFT_ERR_UNSUPPORTED, "weft_stream_create_cuda: %s", why);
  pthread_once(&drv_once, load_driver);
  if (drv_wait32 == NULL)
    return weft__error(NULL, WEFT_ERR_UNSUPPORTED, "weft_stream_create_cuda: the CUDA driver has no "
                       "cuStreamWaitValue32 (stream memory operations)");
  struct weft__cuda_binding *b = calloc(1, sizeof *b);
  if (b == NULL) return weft__error(NULL, WEFT_ERR_NO_MEMORY, "weft_stream_create_cuda: out of memory");
  pthread_mutex_init(&b->mu, NULL);
  b->user = user;
  weft_status_t st = WEFT_SUCCESS;
  cudaError_t e = cudaGetDevice(&b->device);
  /* weft's kernels loaded into this device's context before any stream there waits on weft
   * (mem/cuda_kernels.h says why); once per device */
  if (e == cudaSuccess && (b->device < 0 || b->device >= KERNELS_DEVICES || !atomic_load(&kernels_loaded[b->device]))) {
    /* under a lock: a second binding waits for the first's load to end instead of loading
     * beside it, which could still be loading once the first binding's stream waits */
    pthread_mutex_lock(&kernels_mu);
    if (b->device < 0 || b->device >= KERNELS_DEVICES || !atomic_load(&kernels_loaded[b->device])) {
      int le = weft__cuda_kernels_load();
      if (le != 0) e = (cudaError_t)le;
      else if (b->device >= 0 && b->device < KERNELS_DEVICES) atomic_store(&kernels_loaded[b->device], 1);
    }
    pthread_mutex_unlock(&kernels_mu);
  }
  /* 64 bytes (a cache line) for the ticket, then one for each slot's gate */
  if (e == cudaSuccess)
    e = cudaHostAlloc((void **)&b->done, 64 * (1 + NSLOTS), cudaHostAllocMapped | cudaHostAllocPortable);
  if (e == cudaSuccess) {
    memset(b->done, 0, 64 * (1 + NSLOTS));
    void *d = NULL;
    e = cudaHostGetDevicePointer(&d, b->done, 0);
    b->done_dev = (CUdeviceptr)(uintptr_t)d;
    for (int i = 0; i < NSLOTS; i++) {
      b->slots[i].gate = (volatile unsigned *)((char *)b->done + 64 * (1 + i));
      b->slots[i].gate_dev = (unsigned *)((char *)d + 64 * (1 + i));
    }
  }
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&b->work, cudaStreamNonBlocking);
  unsigned flags = trace_on ? cudaEventDefault : cudaEventDisableTiming; /* timed only when tracing */
  for (int i = 0; i < NSLOTS && e == cudaSuccess; i++) {
    slot *s = &b->slots[i];
    e = cudaEventCreateWithFlags(&s->ev_in, flags);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&s->ev_out, flags);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&s->ev_kernels, cudaEventDisableTiming);
    if (e == cudaSuccess && trace_on) e = cudaEventCreateWithFlags(&s->ev_start, cudaEventDefault);
    if (e == cudaSuccess && trace_on) e = cudaEventCreateWithFlags(&s->ev_waited, cudaEventDefault);
  }
  if (e == cudaSuccess && trace_on && (b->log = calloc(TRACE_CAP, sizeof *b->log)) == NULL)
    e = cudaErrorMemoryAllocation;
  if (e != cudaSuccess) {
    st = cuda_err(NULL, e, "weft_stream_create_cuda");
    binding_free(b);
    return st;
  }
  *out = b;
  return WEFT_SUCCESS;
}

/* Once per process: a warning when the process may run on one CPU only. Its stream thread
 * runs every call on device buffers, and the caller's CUDA waits spin on that same CPU (CUDA
 * spins while the machine has more cores than contexts): on the H200's host, 2 ranks bound
 * to a core each read an 8-byte all-reduce at 1.2-1.3 ms (tools/weftrun_bind.c). */
static void warn_one_cpu(void) {
  static atomic_int warned;
  cpu_set_t set;
  if (atomic_exchange(&warned, 1) || sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1) return;
  WEFT_WARN("weft_stream_create_cuda: this process may run on one CPU only; weft's stream thread, which runs "
            "its calls on device buffers, then shares it with the caller, whose CUDA waits spin (calls can "
            "take milliseconds): give each rank 2 or more CPUs (weftrun does; mpirun --map-by slot:PE=2)");
}

weft_status_t weft_stream_create_cuda(weft_stream_t *stream, cudaStream_t cuda_stream) {
  if (stream == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_stream_create_cuda: stream is NULL");
  struct weft__cuda_binding *b = NULL;
  WEFT_TRY(binding_new(cuda_stream, &b));
  warn_one_cpu();
  weft__cuda_arm();
  weft_status_t st = weft__stream_create_bound(stream, b);
  if (st != WEFT_SUCCESS) binding_free(b);
  return st;
}

weft_status_t weft_mem_alloc_device(void **ptr, size_t size) {
  if (ptr == NULL || size == 0)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_mem_alloc_device: %s",
                       ptr == NULL ? "ptr is NULL" : "size is 0");
  char why[160];
  if (!weft__cuda_usable(why, sizeof why))
    return weft__error(NULL, WEFT_ERR_UNSUPPORTED, "weft_mem_alloc_device: %s", why);
  weft__cuda_arm();
  return weft__mem_cuda.alloc(&weft__mem_cuda, size, ptr);
}

weft_status_t weft_cuda_enable(void) {
  char why[160];
  if (!weft__cuda_usable(why, sizeof why)) return weft__error(NULL, WEFT_ERR_UNSUPPORTED, "weft_cuda_enable: %s", why);
  weft__cuda_arm();
  return WEFT_SUCCESS;
}

/* ---- the extents of a call ------------------------------------------------------------------ */

/* What a call reads (in) and writes (out) of one user buffer on this rank. */
typedef struct {
  void **where;     /* the task's pointer to rewrite (t->sendbuf, t->recvbuf or a p2p op's buf) */
  char *dev;        /* the caller's buffer */
  size_t hi;        /* the bytes [0, hi) of it the call touches */
  int reads;
  int writes;       /* the call writes all of [0, hi) */
  int v_written;    /* all-to-allv's receive buffer: the written blocks come from the counts */
  const weft__mem_space **mem; /* the p2p op's space to switch to host, or NULL */
} extent;

static int is_device(const void *p) { return p != NULL && weft__mem_space_of(p)->kind == WEFT__MEM_CUDA; }

static void add(extent *e, int *n, void **where, const void *dev, size_t bytes, int reads, int writes,
                const weft__mem_space **mem) {
  if (bytes == 0 || !is_device(dev)) return;
  extent *x = &e[(*n)++];
  memset(x, 0, sizeof *x);
  x->where = where;
  x->dev = (char *)dev;
  x->hi = bytes;
  x->reads = reads;
  x->writes = writes;
  x->mem = mem;
}

/* The call's extents on this rank (at most 2 + np2p). */
static int extents_of(weft__task *t, extent *e) {
  struct weft_comm *comm = t->comm;
  int n = 0, me = comm->rank, root = t->root, np = comm->nranks;
  size_t es = weft__dtype_size(t->dtype), c = t->count * es, all = c * (size_t)np;
  void **sb = (void **)&t->sendbuf, **rb = &t->recvbuf;
  switch (t->coll) {
    case WEFT__COLL_ALL_REDUCE: add(e, &n, sb, t->sendbuf, c, 1, 0, NULL); add(e, &n, rb, t->recvbuf, c, 0, 1, NULL); break;
    case WEFT__COLL_BROADCAST:
      if (me == root) add(e, &n, sb, t->sendbuf, c, 1, 0, NULL);
      add(e, &n, rb, t->recvbuf, c, 0, 1, NULL);
      break;
    case WEFT__COLL_REDUCE:
      add(e, &n, sb, t->sendbuf, c, 1, 0, NULL);
      if (me == root) add(e, &n, rb, t->recvbuf, c, 0, 1, NULL);
      break;
    case WEFT__COLL_ALL_GATHER: add(e, &n, sb, t->sendbuf, c, 1, 0, NULL); add(e, &n, rb, t->recvbuf, all, 0, 1, NULL); break;
    case WEFT__COLL_REDUCE_SCATTER: add(e, &n, sb, t->sendbuf, all, 1, 0, NULL); add(e, &n, rb, t->recvbuf, c, 0, 1, NULL); break;
    case WEFT__COLL_ALL_TO_ALL: add(e, &n, sb, t->sendbuf, all, 1, 0, NULL); add(e, &n, rb, t->recvbuf, all, 0, 1, NULL); break;
    case WEFT__COLL_GATHER:
      add(e, &n, sb, t->sendbuf, c, 1, 0, NULL);
      if (me == root) add(e, &n, rb, t->recvbuf, all, 0, 1, NULL);
      break;
    case WEFT__COLL_SCATTER:
      if (me == root) add(e, &n, sb, t->sendbuf, all, 1, 0, NULL);
      add(e, &n, rb, t->recvbuf, c, 0, 1, NULL);
      break;
    case WEFT__COLL_ALL_TO_ALLV: {
      size_t shi = 0, rhi = 0;
      for (int p = 0; p < np; p++) {
        if (WEFT__V_SENDCOUNTS(t)[p] && WEFT__V_SDISPLS(t)[p] + WEFT__V_SENDCOUNTS(t)[p] > shi)
          shi = WEFT__V_SDISPLS(t)[p] + WEFT__V_SENDCOUNTS(t)[p];
        if (WEFT__V_RECVCOUNTS(t)[p] && WEFT__V_RDISPLS(t)[p] + WEFT__V_RECVCOUNTS(t)[p] > rhi)
          rhi = WEFT__V_RDISPLS(t)[p] + WEFT__V_RECVCOUNTS(t)[p];
      }
      add(e, &n, sb, t->sendbuf, shi * es, 1, 0, NULL);
      int before = n;
      add(e, &n, rb, t->recvbuf, rhi * es, 0, 0, NULL);
      if (n > before) e[n - 1].v_written = 1;
      break;
    }
    case WEFT__COLL_SEND: add(e, &n, sb, t->sendbuf, c, 1, 0, NULL); break;
    case WEFT__COLL_RECV: add(e, &n, rb, t->recvbuf, c, 0, 1, NULL); break;
    case WEFT__COLL_P2P_GROUP:
      for (int i = 0; i < t->np2p; i++) {
        weft__p2p_op *o = &t->p2p[i];
        add(e, &n, &o->buf, o->buf, o->bytes, o->is_send, !o->is_send, &o->mem);
      }
      break;
    default: break;
  }
  return n;
}

/* ---- calls on the device buffers themselves -------------------------------------------------- */

/* 1 when t runs unstaged, on its device buffers: the direct algorithms (algos/direct.h) then
 * read and write every rank's buffers in place through CUDA IPC, one kernel or copy per
 * block, on the stream thread's own CUDA stream (WEFT_CUDA_DIRECT=1) or queued on the
 * caller's (=2, below). The peers' buffers were imported when the windows were registered,
 * so no CUDA IPC handle is opened while the caller's stream waits for the call. That needs
 * every buffer of t inside a usable window of device memory on this rank (and so on every
 * rank, NCCL's window contract: a rank whose buffers are not fails the call with a message
 * naming the difference), a collective with a direct row, 2 to WEFT__CUDA_FANOUT_MAX ranks
 * (one fan-out kernel folds them), and weft__window_direct_size, the rule by which
 * weft__direct_wanted takes the direct row on the stream's thread. Every input here is the
 * same on every rank but where the buffers are.
 * Off by default: both forms hung on the H200 at their first kernel, loaded lazily while
 * the caller's stream waited (the kernels are now loaded when a stream is bound; not yet
 * rerun there). tests/gpu/gpu_check.sh runs them.
 * The window list is read without comm->lock, which is held for a whole running operation:
 * windows change only in weft_comm_window_(de)register, collective calls of the callers,
 * not while the same callers enqueue calls on the comm. */
static int plan_queued(const weft__task *t, device_call *dc);

static int runs_direct(const weft__task *t, const extent *e, int n, device_call *dc) {
  struct weft_comm *comm = t->comm;
  if (direct_mode == 0 || comm->direct_windows == 0 || n == 0) return 0;
  if (comm->nranks < 2 || comm->nranks > WEFT__CUDA_FANOUT_MAX) return 0;
  switch (t->coll) {
    case WEFT__COLL_ALL_TO_ALL:
      if (t->sendbuf == t->recvbuf) return 0; /* no direct all-to-all in place */
      break;
    case WEFT__COLL_ALL_REDUCE:
    case WEFT__COLL_BROADCAST:
    case WEFT__COLL_ALL_GATHER:
    case WEFT__COLL_REDUCE_SCATTER: break;
    default: return 0;
  }
  if (!weft__window_direct_size(comm, weft__direct_call_bytes(t))) return 0;
  for (int i = 0; i < n; i++) {
    struct weft_window *w = weft__window_find(comm, e[i].dev, e[i].hi);
    if (w == NULL || w->space->kind != WEFT__MEM_CUDA) return 0;
  }
  return direct_mode != 2 || plan_queued(t, dc);
}

/* ---- WEFT_CUDA_DIRECT=2: the direct kernels on the caller's stream ------------------------------ */

/* The same direct algorithms, but each rank's share is queued on the caller's CUDA stream at
 * enqueue, between a stream wait for ticket `go` and one for the call's last ticket, behind
 * a gate word that the kernels read as they start:
 *   caller:  ev_in | wait(go) | kernels (gated) | ev_kernels | wait(done) | ev_out
 *   thread:  waits for ev_in; the direct driver's first handshake (every rank is in the call,
 *            and where its buffers are); weft__cuda_direct_release checks that they are where
 *            the kernels were told, opens the gate, writes `go`, waits for ev_kernels; the
 *            driver's second handshake; writes `done`.
 * So no CUDA work at all runs on another stream while the caller's stream waits, and
 * nothing is opened then: whichever of the two questions of tests/gpu/cuda_wait_probe CUDA
 * answers badly, this form does not ask it. The kernels need every rank's buffers at
 * enqueue, before any rank has said where they are: they are assumed at the offset this
 * rank's buffers have in its own windows (NCCL's symmetric windows require it too); a rank
 * whose buffers are elsewhere fails the call by name, and its closed gate makes the queued
 * kernels write nothing. Broadcast stays staged (a non-root does not know the root's send
 * buffer). */

/* Every rank's buffer at the offset p has in this rank's window; 0 when a window is too
 * short for it. */
static int assume_symmetric(struct weft_comm *comm, const void *p, size_t bytes, char **at) {
  struct weft_window *w = weft__window_find(comm, p, bytes);
  if (w == NULL) return 0;
  size_t off = (size_t)((const char *)p - w->base);
  for (int j = 0; j < comm->nranks; j++) {
    if (w->peer_base[j] == NULL || !weft__span_fits(off, bytes, w->peer_bytes[j])) return 0;
    at[j] = w->peer_base[j] + off;
  }
  return 1;
}

static int plan_queued(const weft__task *t, device_call *dc) {
  struct weft_comm *comm = t->comm;
  size_t c = t->count * weft__dtype_size(t->dtype), all = c * (size_t)comm->nranks, sb = c, rb = c;
  switch (t->coll) {
    case WEFT__COLL_ALL_REDUCE: break;
    case WEFT__COLL_ALL_GATHER: rb = all; break;
    case WEFT__COLL_REDUCE_SCATTER: sb = all; break;
    case WEFT__COLL_ALL_TO_ALL: sb = rb = all; break;
    default: return 0;
  }
  return assume_symmetric(comm, t->sendbuf, sb, dc->assumed_in) &&
         assume_symmetric(comm, t->recvbuf, rb, dc->assumed_out);
}

/* This rank's share of the direct collective (as algos/<collective>/direct.c's whole-block
 * work does it), on the caller's stream, gated; then ev_kernels. */
static weft_status_t queue_kernels(struct weft__cuda_binding *b, const weft__task *t, device_call *dc) {
  struct weft_comm *comm = t->comm;
  int n = comm->nranks, me = comm->rank, rc = 0;
  size_t es = weft__dtype_size(t->dtype), count = t->count, block = count * es;
  char *outs[WEFT__CUDA_FANOUT_MAX], *ins[WEFT__CUDA_FANOUT_MAX], **in = dc->assumed_in, **out = dc->assumed_out;
  const volatile unsigned *gate = dc->sl->gate_dev;
  switch (t->coll) {
    case WEFT__COLL_ALL_REDUCE: { /* block me of n near-equal blocks, as the direct algorithm's */
      size_t lo, hi;
      weft__direct_block(count, n, me, &lo, &hi);
      for (int j = 0; j < n; j++) outs[j] = out[j] + lo * es, ins[j] = in[j] + lo * es;
      if (hi > lo) rc = weft__cuda_fanout_gated(outs, n, ins, n, hi - lo, t->dtype, t->op, gate, b->user);
      break;
    }
    case WEFT__COLL_ALL_GATHER:
      for (int j = 0; j < n; j++) outs[j] = out[j] + (size_t)me * block;
      ins[0] = in[me];
      rc = weft__cuda_fanout_gated(outs, n, ins, 1, count, t->dtype, WEFT_SUM, gate, b->user);
      break;
    case WEFT__COLL_REDUCE_SCATTER:
      for (int j = 0; j < n; j++) ins[j] = in[j] + (size_t)me * block;
      outs[0] = out[me];
      rc = weft__cuda_fanout_gated(outs, 1, ins, n, count, t->dtype, t->op, gate, b->user);
      break;
    case WEFT__COLL_ALL_TO_ALL:
      for (int j = 0; j < n && rc == 0; j++) {
        outs[0] = out[j] + (size_t)me * block;
        ins[0] = in[me] + (size_t)j * block;
        rc = weft__cuda_fanout_gated(outs, 1, ins, 1, count, t->dtype, WEFT_SUM, gate, b->user);
      }
      break;
    default: break;
  }
  if (rc != 0) return cuda_err(comm, (cudaError_t)rc, "queueing the direct kernels on the CUDA stream");
  CUDA_TRY(comm, cudaEventRecord(dc->sl->ev_kernels, b->user), "cudaEventRecord");
  return WEFT_SUCCESS;
}

static void nap(unsigned round) {
  if (round < 64) sched_yield();
  else nanosleep(&(struct timespec){0, round < 1024 ? 2000 : 50000}, NULL);
}

int weft__cuda_direct_queued(const weft__task *t) {
  const device_call *dc = t->device_call;
  return dc != NULL && dc->queued_direct;
}

weft_status_t weft__cuda_direct_release(weft__task *t, char *const *in, char *const *out) {
  device_call *dc = t->device_call;
  struct weft_comm *comm = t->comm;
  for (int j = 0; j < comm->nranks; j++) {
    int bad_in = in[j] != dc->assumed_in[j], bad_out = out[j] != dc->assumed_out[j];
    if (bad_in || bad_out) { /* the gate stays shut: the queued kernels write nothing */
      char what[160];
      return weft__error(comm, WEFT_ERR_INVALID_USAGE, "rank %d: %s direct on the CUDA stream: peer %d's %s "
                         "buffer is not at the offset of ours in its window: with WEFT_CUDA_DIRECT=2 a call's "
                         "buffers must sit at the same offset of the same windows on every rank", comm->rank,
                         weft__task_describe(t, what, sizeof what), j, bad_in ? "send" : "receive");
    }
  }
  __atomic_store_n(dc->sl->gate, 1u, __ATOMIC_RELEASE);
  __atomic_store_n(dc->b->done, dc->go, __ATOMIC_RELEASE); /* the caller's stream runs the kernels */
  for (unsigned round = 0;; round++) {
    cudaError_t e = cudaEventQuery(dc->sl->ev_kernels);
    if (e == cudaSuccess) return WEFT_SUCCESS;
    if (e != cudaErrorNotReady) return cuda_err(comm, e, "waiting for the direct kernels on the CUDA stream");
    if (atomic_load(&comm->aborted))
      return weft__error(comm, WEFT_ERR_ABORTED, "rank %d: the communicator was aborted", comm->rank);
    nap(round);
  }
}

/* ---- staging ------------------------------------------------------------------------------ */

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

/* Gives every extent a mirror in one host block (same mirror for nested extents); fills the
 * copies in and out; returns the host bytes needed, or, with host != NULL, rewrites the task
 * to the mirrors. */
static size_t stage(weft__task *t, extent *e, int n, char *host, device_call *dc) {
  size_t off[64], need = 0;
  int parent[64];
  for (int i = 0; i < n; i++) {
    parent[i] = -1;
    /* nested in an earlier, larger extent: in-place calls (same buffer, or a block of it) */
    for (int j = 0; j < n && parent[i] < 0; j++) {
      if (j == i || parent[j] >= 0) continue;
      int inside = e[i].dev >= e[j].dev && e[i].dev + e[i].hi <= e[j].dev + e[j].hi;
      int same = e[i].dev == e[j].dev && e[i].hi == e[j].hi;
      if (inside && (!same || j < i)) parent[i] = j;
    }
  }
  for (int i = 0; i < n; i++)
    if (parent[i] < 0) off[i] = need, need += align64(e[i].hi);
  if (host == NULL) return need;
  dc->nin = dc->nout = 0;
  for (int i = 0; i < n; i++) {
    int p = parent[i] < 0 ? i : parent[i];
    char *mirror = host + off[p] + (size_t)(e[i].dev - e[p].dev);
    /* a nested extent's input comes with its parent's copy, which must then read it */
    if (e[i].reads) e[p].reads = 1;
    *e[i].where = mirror;
    if (e[i].mem != NULL) *e[i].mem = &weft__mem_host;
    if (e[i].v_written) {
      size_t es = weft__dtype_size(t->dtype);
      for (int q = 0; q < t->comm->nranks; q++) {
        size_t cnt = WEFT__V_RECVCOUNTS(t)[q], at = WEFT__V_RDISPLS(t)[q] * es;
        if (cnt > 0) dc->out[dc->nout++] = (xfer){e[i].dev + at, mirror + at, cnt * es};
      }
    } else if (e[i].writes) {
      dc->out[dc->nout++] = (xfer){e[i].dev, mirror, e[i].hi};
    }
  }
  for (int i = 0; i < n; i++)
    if (parent[i] < 0 && e[i].reads) dc->in[dc->nin++] = (xfer){e[i].dev, host + off[i], e[i].hi};
  t->mem = &weft__mem_host;
  return need;
}

/* Calls of the process whose stream wait the thread has not released yet (their done
 * ticket not stored), counted under waits_mu before a wait is queued: with the lock held and
 * none counted, no stream of the process sits in a wait of weft's, and cudaFreeHost returns
 * (waits that are not weft's, a program's own, are the program's to mind). */
static pthread_mutex_t waits_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int waits_pending;

/* Frees b's retired staging blocks if no weft call of the process is waited for now. */
static void free_retired(struct weft__cuda_binding *b) {
  if (b->nretired == 0 || atomic_load(&waits_pending) != 0) return;
  pthread_mutex_lock(&waits_mu);
  if (atomic_load(&waits_pending) == 0) {
    for (int i = 0; i < b->nretired; i++) cudaFreeHost(b->retired[i]);
    b->nretired = 0;
  }
  pthread_mutex_unlock(&waits_mu);
}

/* The slot of the next ticket, free (its last call's copies done), with bytes of staging. */
static weft_status_t take_slot(struct weft__cuda_binding *b, uint32_t ticket, size_t bytes, slot **out) {
  slot *s = &b->slots[ticket % NSLOTS];
  if (s->used) CUDA_TRY(NULL, cudaEventSynchronize(s->ev_out), "waiting for a staging slot");
  if (s->used) harvest(b, s);
  s->used = 0;
  if (bytes > s->bytes) {
    if (s->host != NULL) { /* retired, not freed: see the binding's `retired` */
      if (b->nretired == b->cap_retired) {
        int cap = b->cap_retired ? 2 * b->cap_retired : 16;
        char **r = realloc(b->retired, (size_t)cap * sizeof *r);
        if (r == NULL) return weft__error(NULL, WEFT_ERR_NO_MEMORY, "staging a call on device buffers: out of memory");
        b->retired = r, b->cap_retired = cap;
      }
      b->retired[b->nretired++] = s->host;
    }
    free_retired(b);
    s->host = NULL;
    s->bytes = 0;
    size_t want = bytes < ((size_t)1 << 20) ? (size_t)1 << 20 : bytes; /* small calls share 1 MiB */
    CUDA_TRY(NULL, cudaHostAlloc((void **)&s->host, want, cudaHostAllocPortable), "cudaHostAlloc of staging memory");
    s->bytes = want;
  }
  *out = s;
  return WEFT_SUCCESS;
}

/* ---- enqueue (the caller's thread) ------------------------------------------------------------ */

static weft_status_t enqueue_locked(weft_stream_t s, struct weft__cuda_binding *b, weft__task *t, uint64_t t_entry) {
  struct weft_comm *comm = t->comm;
  int np = t->coll == WEFT__COLL_P2P_GROUP ? t->np2p : 0;
  extent e[64];
  int ne = 0;
  if (t->mem->kind == WEFT__MEM_CUDA) {
    if (2 + np > 64)
      return weft__error(comm, WEFT_ERR_UNSUPPORTED, "rank %d: a group of %d sends and receives on device "
                         "buffers (at most 62 on one CUDA stream)", comm->rank, np);
    ne = extents_of(t, e);
  }
  size_t nx = (size_t)ne + (size_t)np + (size_t)comm->nranks + 2;
  device_call *dc = calloc(1, sizeof *dc + 2 * nx * sizeof(xfer));
  if (dc == NULL) return weft__error(comm, WEFT_ERR_NO_MEMORY, "rank %d: out of memory", comm->rank);
  dc->in = dc->all;
  dc->out = dc->all + nx;
  dc->b = b;
  t->device_call = dc;
  /* A call that moves no bytes (count 0) touches no device memory: the host algorithms run
   * it (NCCL returns at once; here every rank still passes through it, as on the host) */
  if (t->mem->kind == WEFT__MEM_CUDA && ne == 0 && np == 0) t->mem = &weft__mem_host;
  if (ne > 0 && runs_direct(t, e, ne, dc)) {
    dc->queued_direct = direct_mode == 2;
    ne = 0; /* nothing to stage */
  }
  CUDA_TRY(comm, cudaSetDevice(b->device), "cudaSetDevice");
  uint32_t ticket = b->issued + 1;
  size_t need = ne > 0 ? stage(t, e, ne, NULL, NULL) : 0;
  slot *sl = NULL;
  WEFT_TRY(take_slot(b, ticket, need, &sl));
  if (b->log != NULL) {
    memset(&sl->tr, 0, sizeof sl->tr);
    sl->tr.rank = comm->rank;
    sl->tr.coll = (int)t->coll;
    sl->tr.bytes = t->count * weft__dtype_size(t->dtype);
    sl->tr.enq_entry = t_entry;
    CUDA_TRY(comm, cudaEventRecord(sl->ev_start, b->user), "cudaEventRecord");
  }
  if (ne > 0) {
    stage(t, e, ne, sl->host, dc);
    dc->staged = 1;
    for (int i = 0; i < dc->nin; i++)
      CUDA_TRY(comm, cudaMemcpyAsync(dc->in[i].host, dc->in[i].dev, dc->in[i].bytes, cudaMemcpyDeviceToHost, b->user),
               "staging the input (cudaMemcpyAsync)");
  }
  CUDA_TRY(comm, cudaEventRecord(sl->ev_in, b->user), "cudaEventRecord");
  dc->sl = sl;
  if (dc->queued_direct) { /* two tickets: the kernels run after `go`, the stream goes on after the last */
    *sl->gate = 0;          /* the slot's last call is complete (take_slot) */
    dc->go = ticket++;
  }
  dc->ticket = ticket;
  /* Everything the CUDA stream does for the call is queued before the thread gets it: the
   * thread may run the call, and free it, as soon as it has it (an early error), and it
   * reads ev_kernels. Once a stream wait is queued the thread must get the call (it writes
   * the tickets the waits want), so a failure from here on is returned after the push. */
  weft_status_t st = WEFT_SUCCESS;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&waits_mu); /* counted before the wait is queued: free_retired */
  atomic_fetch_add(&waits_pending, 1);
  pthread_mutex_unlock(&waits_mu);
  dc->counted = 1;
  if (dc->queued_direct) {
    r = drv_wait32((CUstream)b->user, b->done_dev, dc->go, CU_STREAM_WAIT_VALUE_GEQ);
    if (r == CUDA_SUCCESS) st = queue_kernels(b, t, dc);
  }
  if (r == CUDA_SUCCESS) r = drv_wait32((CUstream)b->user, b->done_dev, ticket, CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS)
    st = weft__error(comm, WEFT_ERR_SYSTEM, "rank %d: cuStreamWaitValue32 failed (CUresult %d): the CUDA "
                     "stream does not wait for the call", comm->rank, (int)r);
  cudaError_t ce = cudaSuccess;
  if (st == WEFT_SUCCESS && b->log != NULL) ce = cudaEventRecord(sl->ev_waited, b->user);
  for (int i = 0; st == WEFT_SUCCESS && ce == cudaSuccess && i < dc->nout; i++)
    ce = cudaMemcpyAsync(dc->out[i].dev, dc->out[i].host, dc->out[i].bytes, cudaMemcpyHostToDevice, b->user);
  if (st == WEFT_SUCCESS && ce != cudaSuccess) st = cuda_err(comm, ce, "queueing the copy back of the result");
  /* after whatever was queued, also after a failure: the slot's next call waits for it */
  sl->used = cudaEventRecord(sl->ev_out, b->user) == cudaSuccess;
  if (!sl->used && st == WEFT_SUCCESS) st = cuda_err(comm, cudaGetLastError(), "cudaEventRecord");
  b->issued = ticket;
  weft__stream_push(s, t); /* the thread's from here: nothing below touches t or dc */
  if (b->log != NULL) {
    sl->tr.enq_queued = sl->tr.enq_return = weft__now_ns();
    sl->tr.valid = st == WEFT_SUCCESS;
  }
  return st;
}

weft_status_t weft__cuda_enqueue(weft_stream_t s, struct weft__cuda_binding *b, weft__task *t) {
  /* The binding's device for the CUDA calls, the caller's current device afterwards. */
  uint64_t t_entry = b->log != NULL ? weft__now_ns() : 0;
  int caller_device = -1;
  if (cudaGetDevice(&caller_device) != cudaSuccess) cudaGetLastError(), caller_device = -1;
  pthread_mutex_lock(&b->mu);
  uint32_t before = b->issued;
  weft_status_t st = enqueue_locked(s, b, t, t_entry);
  int queued = b->issued != before;
  pthread_mutex_unlock(&b->mu);
  if (caller_device >= 0 && caller_device != b->device) cudaSetDevice(caller_device);
  if (st != WEFT_SUCCESS && !queued) weft__task_free(t);
  return st;
}

/* ---- the progress thread ------------------------------------------------------------------------ */

weft_status_t weft__cuda_task_begin(struct weft__cuda_binding *b, weft__task *t) {
  device_call *dc = t->device_call;
  struct weft_comm *comm = t->comm;
  trace_rec *tr = b->log != NULL ? &dc->sl->tr : NULL;
  if (tr != NULL) tr->taken = weft__now_ns();
  CUDA_TRY(comm, cudaSetDevice(b->device), "cudaSetDevice");
  weft__cuda_use_thread_stream(b->work, b->device);
  /* The work queued before the call is the caller's: it has no deadline of ours, but an
   * abort ends the wait. */
  for (unsigned round = 0;; round++) {
    cudaError_t e = cudaEventQuery(dc->sl->ev_in);
    if (e == cudaSuccess) {
      if (tr != NULL) tr->input_seen = weft__now_ns(), tr->rounds = (int)round + 1;
      return WEFT_SUCCESS;
    }
    if (e != cudaErrorNotReady) return cuda_err(comm, e, "waiting for the CUDA stream to reach the call");
    if (atomic_load(&comm->aborted))
      return weft__error(comm, WEFT_ERR_ABORTED, "rank %d: the communicator was aborted", comm->rank);
    nap(round);
  }
}

weft_status_t weft__cuda_task_end(struct weft__cuda_binding *b, weft__task *t, weft_status_t st) {
  device_call *dc = t->device_call;
  char msg[200];
  weft_status_t dev = weft__cuda_take_error(msg, sizeof msg);
  if (st == WEFT_SUCCESS && dev != WEFT_SUCCESS)
    st = weft__error(t->comm, dev, "rank %d: a device operation failed: %s", t->comm->rank, msg);
  /* The CUDA stream may go on: the staged result is complete in host memory. */
  if (b->log != NULL) dc->sl->tr.ticket_stored = weft__now_ns();
  __atomic_store_n(b->done, dc->ticket, __ATOMIC_RELEASE);
  if (dc->counted) atomic_fetch_sub(&waits_pending, 1);
  return st;
}

/* ---- calls without a stream -------------------------------------------------------------------- */

#define MAX_DEVICES 64
static pthread_mutex_t blocking_lock = PTHREAD_MUTEX_INITIALIZER;
static weft_stream_t blocking_streams[MAX_DEVICES]; /* per device, bound to the legacy default stream */

weft_status_t weft__cuda_run_blocking(weft__task *t) {
  struct weft_comm *comm = t->comm;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess || dev < 0 || dev >= MAX_DEVICES) {
    weft__task_free(t);
    return e != cudaSuccess ? cuda_err(comm, e, "cudaGetDevice") : weft__error(comm, WEFT_ERR_UNSUPPORTED, "device %d", dev);
  }
  pthread_mutex_lock(&blocking_lock);
  weft_status_t st = WEFT_SUCCESS;
  if (blocking_streams[dev] == NULL) st = weft_stream_create_cuda(&blocking_streams[dev], cudaStreamLegacy);
  weft_stream_t s = blocking_streams[dev];
  pthread_mutex_unlock(&blocking_lock);
  if (st != WEFT_SUCCESS) {
    weft__task_free(t);
    return st;
  }
  st = weft__stream_enqueue(s, t);
  if (st != WEFT_SUCCESS) return st;
  weft_status_t ran = weft_stream_synchronize(s);
  e = cudaStreamSynchronize(cudaStreamLegacy);
  if (ran != WEFT_SUCCESS) return ran;
  if (e != cudaSuccess) return cuda_err(comm, e, "cudaStreamSynchronize");
  return WEFT_SUCCESS;
}

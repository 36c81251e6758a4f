/* space.h: memory spaces. A memory space owns a kind of memory (host memory today; device
 * memory, RDMA-registered memory later) and every operation on bytes in it: copy, reduce,
 * average and fill. Algorithms and transports never dereference a user buffer themselves:
 * they call the space of the task's buffers, so one schedule runs on any memory whose
 * space implements these operations (NCCL keeps the same split between its transports,
 * which move bytes, and its device primitives, which reduce them; UCC's mc/ components
 * are the same idea). The spaces: mem/host.c (the SIMD kernels of mem/reduce*.c) and
 * mem/guarded.c (test memory that crashes anything which touches it directly).
 *
 * The contract, for the spaces and for their callers:
 *
 * Pointers. An operation's pointers may each lie in this space's memory or in host memory
 * (scratch, a transport's FIFO slot, a peer's mapped window); the space resolves each. A
 * user buffer in another non-host space than its task's is rejected at the call (enqueue).
 * Regions of one operation must not overlap unless the operation says so (WEFT__MEM_OVERLAP
 * for copy; reduce's dst may equal a or b exactly).
 *
 * Ordering and completion. An operation may still run when it returns (a CUDA space
 * queues it on its own device queue; the host space's non-temporal stores drain later).
 * Operations one thread issues on one space take effect in issue order. Their bytes are
 * visible to other threads, to other processes and to transports only after that thread
 * calls weft__mem_wait(space). Who waits: the core before a send is handed to a transport
 * (lib/req.c), a transport before it publishes bytes it wrote through the space (a FIFO
 * slot) and before it completes a receive it delivered through the space, the direct
 * algorithms before telling peers they are done, and the task before it returns to the
 * user. A space whose operations complete when they return (flags & WEFT__MEM_SYNC) lets
 * the callers skip those waits, except after WEFT__MEM_NT copies, which always need one.
 *
 * Ownership. The caller owns every buffer; a space keeps no pointer past an operation.
 * alloc hands out memory the caller frees with the same space's free; export hands a
 * peer process what it needs to map a buffer (import), which stays valid until the
 * exporting process frees the buffer; an imported mapping is the importer's to unmap.
 *
 * Blocking. No operation waits for another rank. wait blocks only until this thread's own
 * operations have completed (host: a store fence). alloc, free, export and import make
 * system calls and may block on them; they are for setup, never for the data path.
 *
 * Errors. The data operations cannot fail (their arguments are the core's, already
 * checked; a CUDA space would record a failure and report it from wait's caller through
 * the task). alloc and free return a weft status with a message that names the operation;
 * import returns an errno for its caller to report with the rank and the peer. Thread-safe: every
 * operation may run on several threads at once (a stream's thread and the caller's). */
#ifndef WEFT_MEM_SPACE_H
#define WEFT_MEM_SPACE_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "weft.h"

/* The kinds of memory, one per space; algorithm rows name the kinds they handle. */
typedef enum {
  WEFT__MEM_HOST = 0,    /* ordinary host memory: malloc, the stack, weft_mem_alloc */
  WEFT__MEM_GUARDED = 1, /* tests: host memory reachable only through its space */
  WEFT__MEM_CUDA = 2,    /* CUDA device memory (mem/cuda.c, --with-cuda); calls on it are
                            staged through host memory (lib/stream_cuda.h) */
  WEFT__MEM_NUM_KINDS
} weft__mem_kind;
#define WEFT__MEM_KIND_BIT(k) (1u << (k))
/* What an algorithm written for CPUs handles: it touches user buffers only through the
 * space, and keeps its scratch in host memory. */
#define WEFT__MEM_KINDS_CPU (WEFT__MEM_KIND_BIT(WEFT__MEM_HOST) | WEFT__MEM_KIND_BIT(WEFT__MEM_GUARDED))

/* Flags of a copy. */
enum {
  WEFT__MEM_NT = 1u << 0,      /* bypass the cache (non-temporal stores): for output nothing
                                  reads again soon; ordered only by weft__mem_wait */
  WEFT__MEM_OVERLAP = 1u << 1, /* the regions may overlap (memmove) */
};
/* Properties of a space. */
enum {
  WEFT__MEM_SYNC = 1u << 0, /* operations complete when they return (but WEFT__MEM_NT copies) */
};

/* What a peer process needs to map an exported buffer (lib/window.c all-gathers it). */
typedef struct weft__mem_handle {
  int32_t pid;       /* the exporting process */
  int32_t fd;        /* its memfd holding the buffer (host and guarded memory) */
  uint64_t offset;   /* of the buffer in the memfd (CUDA: in its allocation) */
  uint64_t bytes;
  unsigned char token[64]; /* CUDA: the allocation's cudaIpcMemHandle_t; else zero */
} weft__mem_handle;

/* A peer's buffer as imported here. */
typedef struct weft__mem_mapping {
  char *base;        /* the buffer's first byte, as this process reaches it */
  void *map_addr;    /* what to unmap (page-aligned), NULL when nothing is mapped */
  size_t map_len;
} weft__mem_mapping;

typedef struct weft__mem_space weft__mem_space;
struct weft__mem_space {
  const char *name;          /* "host", "guarded" */
  weft__mem_kind kind;
  unsigned flags;            /* WEFT__MEM_SYNC */

  /* ---- data (see the contract above) ---- */
  /* n bytes from src to dst (flags: WEFT__MEM_NT, WEFT__MEM_OVERLAP). */
  void (*copy)(const weft__mem_space *s, void *dst, const void *src, size_t n, unsigned flags);
  /* dst[i] = a[i] op b[i], i < count (WEFT_AVG reduces as sum; divide with avg). */
  void (*reduce)(const weft__mem_space *s, void *dst, const void *a, const void *b,
                 size_t count, weft_datatype_t dt, weft_redop_t op);
  /* buf[i] = buf[i] / divisor, in the datatype's own arithmetic (divisor <= 1: nothing). */
  void (*avg)(const weft__mem_space *s, void *buf, size_t count, weft_datatype_t dt, int divisor);
  /* n bytes of dst set to byte. */
  void (*fill)(const weft__mem_space *s, void *dst, int byte, size_t n);
  /* out[j][i] = in[0][i] op ... op in[nin-1][i] (divided by nin for WEFT_AVG) for every
   * j < nout, in one pass with non-temporal stores (as WEFT__MEM_NT); 0 when the space
   * cannot for these arguments (the caller then reduces and copies). nin >= 2. */
  int (*reduce_fanout)(const weft__mem_space *s, char *const *out, int nout, char *const *in,
                       int nin, size_t count, weft_datatype_t dt, weft_redop_t op);
  /* Every operation this thread issued on s has completed and is visible (above). */
  void (*wait)(const weft__mem_space *s);
  /* An address of [p, p + n) that host code and system calls (sendmsg, process_vm_readv)
   * may use for as long as the buffer lives, or NULL when there is none (device memory:
   * the caller stages through host memory with copy). */
  void *(*host_view)(const weft__mem_space *s, const void *p, size_t n);

  /* ---- memory ---- */
  /* bytes of this space's memory that other processes of the host can import. */
  weft_status_t (*alloc)(const weft__mem_space *s, size_t bytes, void **p);
  /* Frees what alloc returned (NULL: nothing). */
  weft_status_t (*free)(const weft__mem_space *s, void *p);
  /* 1 when p lies in memory this space allocated. */
  int (*owns)(const weft__mem_space *s, const void *p);
  /* Fills h for [p, p + bytes) when it lies inside one alloc block; else 0. */
  int (*export_buf)(const weft__mem_space *s, const void *p, size_t bytes, weft__mem_handle *h);
  /* Maps a peer's exported buffer into this process (m->base: where to reach it, in this
   * space). Returns 0, or an errno (EACCES / EPERM: another user, or no ptrace read
   * access), raising nothing: the caller decides whether that is an error and names the
   * peer (lib/window.c makes the window unusable with one info line). */
  int (*import_buf)(const weft__mem_space *s, const weft__mem_handle *h, weft__mem_mapping *m);
  /* Unmaps what import_buf mapped (a zeroed mapping: nothing). */
  void (*unimport)(const weft__mem_space *s, weft__mem_mapping *m);
};

/* The spaces (mem/host.c, mem/guarded.c). */
extern const weft__mem_space weft__mem_host;

/* ---- finding a pointer's space -----------------------------------------------------
 * Blocks alive in spaces other than host; while it is 0 every pointer is host memory and
 * weft__mem_space_of costs one relaxed load. */
extern atomic_long weft__mem_foreign_blocks;
/* The space whose memory holds p, asking every non-host space (mem/spaces.c). */
const weft__mem_space *weft__mem_space_lookup(const void *p);
static inline const weft__mem_space *weft__mem_space_of(const void *p) {
  if (atomic_load_explicit(&weft__mem_foreign_blocks, memory_order_relaxed) == 0) return &weft__mem_host;
  return weft__mem_space_lookup(p);
}
/* The space of a call's buffers: the first non-host one of a and b, else host. NULL when
 * they lie in two different non-host spaces (the caller rejects the call). */
static inline const weft__mem_space *weft__mem_space_of2(const void *a, const void *b) {
  if (atomic_load_explicit(&weft__mem_foreign_blocks, memory_order_relaxed) == 0) return &weft__mem_host;
  const weft__mem_space *sa = weft__mem_space_lookup(a), *sb = weft__mem_space_lookup(b);
  if (sa == &weft__mem_host) return sb;
  return sb == &weft__mem_host || sb == sa ? sa : NULL;
}

/* ---- calling a space ----------------------------------------------------------------- */
static inline void weft__mem_copy(const weft__mem_space *s, void *dst, const void *src, size_t n,
                                  unsigned flags) {
  if (n == 0) return;
  if (s == &weft__mem_host && flags == 0) memcpy(dst, src, n); /* host's plain copy, inline: the latency path */
  else s->copy(s, dst, src, n, flags);
}
static inline void weft__mem_reduce(const weft__mem_space *s, void *dst, const void *a, const void *b,
                                    size_t count, weft_datatype_t dt, weft_redop_t op) {
  if (count > 0) s->reduce(s, dst, a, b, count, dt, op);
}
static inline void weft__mem_avg(const weft__mem_space *s, void *buf, size_t count, weft_datatype_t dt,
                                 int divisor) {
  if (count > 0 && divisor > 1) s->avg(s, buf, count, dt, divisor);
}
static inline void weft__mem_fill(const weft__mem_space *s, void *dst, int byte, size_t n) {
  if (n > 0) s->fill(s, dst, byte, n);
}
static inline void weft__mem_wait(const weft__mem_space *s) { s->wait(s); }
/* The wait a caller owes before publishing bytes it wrote through s with these flags. */
static inline void weft__mem_publish(const weft__mem_space *s, unsigned flags) {
  if ((flags & WEFT__MEM_NT) || !(s->flags & WEFT__MEM_SYNC)) s->wait(s);
}

/* Copies at least this large bypass the cache when nothing reads the output soon: the
 * WEFT_NT_COPY_BYTES environment variable read once per process (0 turns it off), default
 * 16 MiB (half this VM's 32 MiB L3). A property of the host's caches. Thread-safe. */
size_t weft__mem_nt_threshold(void);
/* WEFT__MEM_NT when a message of message_bytes (or any, when force) should bypass the
 * cache, else 0. */
static inline unsigned weft__mem_nt_flag(size_t message_bytes, int force) {
  return force || message_bytes >= weft__mem_nt_threshold() ? WEFT__MEM_NT : 0;
}

/* Whether bytes bytes at offset off fit inside a region of size bytes, without overflow
 * (the check alloc blocks, windows and peers' descriptors all need). Pure. */
static inline int weft__span_fits(size_t off, size_t bytes, size_t size) {
  return bytes <= size && off <= size - bytes;
}
#endif

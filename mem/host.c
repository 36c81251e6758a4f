/* host.c: the host memory space (mem/space.h): ordinary memory the CPU reaches directly.
 *
 * Data: copies are memcpy / memmove, or the non-temporal copy (mem/nt_copy.h) for output
 * nothing reads again soon; reductions and the division of WEFT_AVG are the SIMD kernels
 * (mem/kernels.h); wait is a store fence, which is all the non-temporal stores need. Every
 * other operation completes when it returns (WEFT__MEM_SYNC), so the core skips its waits
 * on the latency path.
 *
 * Memory (weft_mem_alloc): each block is its own memfd (anonymous, close-on-exec), mapped
 * MAP_SHARED. The fd stays open while the block lives, so a peer can open it as
 * /proc/<our pid>/fd/<fd> and map the same pages (import below): the kernel allows that to
 * a process of the same user with ptrace read access, the rule of Linux's cross-memory
 * attach. The kernel frees the pages when the last mapping and fd go. A process-wide list
 * under a mutex maps pointers back to their block: registration is rare, so a list is
 * enough. Same idea as NCCL's ncclMemAlloc (cuMem with a shareable handle); no code taken. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "lib/status.h"
#include "mem/host.h"
#include "mem/kernels.h"
#include "mem/map_colour.h"
#include "mem/nt_copy.h"
#include "mem/reduce_nt.h"
#include "mem/space.h"

/* ---- data -------------------------------------------------------------------------- */

static void host_copy(const weft__mem_space *s, void *dst, const void *src, size_t n, unsigned flags) {
  if (flags & WEFT__MEM_OVERLAP) memmove(dst, src, n);
  else if (flags & WEFT__MEM_NT) weft__nt_copy_unfenced(dst, src, n);
  else memcpy(dst, src, n);
}

static void host_reduce(const weft__mem_space *s, void *dst, const void *a, const void *b, size_t count,
                        weft_datatype_t dt, weft_redop_t op) {
  weft__reduce(dst, a, b, count, dt, op);
}

static void host_avg(const weft__mem_space *s, void *buf, size_t count, weft_datatype_t dt, int divisor) {
  weft__avg_finalize(buf, count, dt, divisor);
}

static void host_fill(const weft__mem_space *s, void *dst, int byte, size_t n) { memset(dst, byte, n); }

static int host_reduce_fanout(const weft__mem_space *s, char *const *out, int nout, char *const *in, int nin,
                              size_t count, weft_datatype_t dt, weft_redop_t op) {
  return weft__reduce_nt(out, nout, in, nin, count, dt, op);
}

static void host_wait(const weft__mem_space *s) { weft__store_fence(); }

static void *host_view(const weft__mem_space *s, const void *p, size_t n) { return (void *)p; }

/* ---- memfd blocks ---------------------------------------------------------------------- */

typedef struct mem_block {
  char *base;
  size_t bytes; /* mapped length: the request rounded up to pages */
  int fd;
  struct mem_block *next;
} mem_block;

static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_block *blocks;

weft_status_t weft__memfd_create(const char *name, size_t size, int *fd, size_t *bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (size > SIZE_MAX - page)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "%s: size %zu too large", name, size);
  *bytes = (size + page - 1) / page * page;
  *fd = memfd_create(name, MFD_CLOEXEC);
  if (*fd < 0) return weft__error(NULL, WEFT_ERR_SYSTEM, "%s: memfd_create: %s", name, strerror(errno));
  if (ftruncate(*fd, (off_t)*bytes) != 0) {
    int e = errno;
    close(*fd);
    return weft__error(NULL, WEFT_ERR_SYSTEM, "%s: ftruncate to %zu bytes: %s", name, *bytes, strerror(e));
  }
  return WEFT_SUCCESS;
}

static weft_status_t host_alloc(const weft__mem_space *s, size_t size, void **ptr) {
  *ptr = NULL;
  int fd = -1;
  size_t bytes = 0;
  WEFT_TRY(weft__memfd_create("weft_mem_alloc", size, &fd, &bytes));
  mem_block *b = calloc(1, sizeof *b);
  void *base = b != NULL ? weft__map_coloured(bytes, fd, 0) : MAP_FAILED; /* why: map_colour.h */
  if (base == MAP_FAILED) {
    int e = b != NULL ? errno : ENOMEM;
    close(fd);
    free(b);
    return weft__error(NULL, e == ENOMEM ? WEFT_ERR_NO_MEMORY : WEFT_ERR_SYSTEM,
                       "weft_mem_alloc: mmap of %zu bytes: %s", bytes, strerror(e));
  }
  b->base = base;
  b->bytes = bytes;
  b->fd = fd;
  pthread_mutex_lock(&blocks_lock);
  b->next = blocks;
  blocks = b;
  pthread_mutex_unlock(&blocks_lock);
  *ptr = base;
  return WEFT_SUCCESS;
}

static weft_status_t host_free(const weft__mem_space *s, void *ptr) {
  if (ptr == NULL) return WEFT_SUCCESS;
  pthread_mutex_lock(&blocks_lock);
  mem_block **at = &blocks;
  while (*at != NULL && (*at)->base != ptr) at = &(*at)->next;
  mem_block *b = *at;
  if (b != NULL) *at = b->next;
  pthread_mutex_unlock(&blocks_lock);
  if (b == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_mem_free: %p was not returned by weft_mem_alloc", ptr);
  munmap(b->base, b->bytes);
  close(b->fd);
  free(b);
  return WEFT_SUCCESS;
}

/* Host memory is everything no other space claims. */
static int host_owns(const weft__mem_space *s, const void *p) { return 1; }

static int host_export(const weft__mem_space *s, const void *p, size_t bytes, weft__mem_handle *h) {
  uintptr_t a = (uintptr_t)p;
  int found = 0;
  pthread_mutex_lock(&blocks_lock);
  for (const mem_block *b = blocks; b != NULL && !found; b = b->next) {
    uintptr_t lo = (uintptr_t)b->base;
    if (a >= lo && weft__span_fits(a - lo, bytes, b->bytes)) {
      h->pid = (int32_t)getpid();
      h->fd = b->fd;
      h->offset = (uint64_t)(a - lo);
      h->bytes = bytes;
      found = 1;
    }
  }
  pthread_mutex_unlock(&blocks_lock);
  return found;
}

int weft__memfd_open(const weft__mem_handle *h, size_t *start, size_t *lead, int *fd) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
  *fd = open(path, O_RDWR | O_CLOEXEC);
  if (*fd < 0) return errno;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  *start = (size_t)h->offset / page * page;
  *lead = (size_t)h->offset - *start;
  return 0;
}

int weft__memfd_import(const weft__mem_handle *h, weft__mem_mapping *m) {
  memset(m, 0, sizeof *m);
  size_t start = 0, lead = 0;
  int fd, err = weft__memfd_open(h, &start, &lead, &fd);
  if (err != 0) return err;
  size_t len = lead + (size_t)h->bytes;
  void *addr = weft__map_coloured(len, fd, (off_t)start); /* why: map_colour.h */
  err = addr == MAP_FAILED ? errno : 0;
  close(fd);
  if (err != 0) return err;
  m->map_addr = addr;
  m->map_len = len;
  m->base = (char *)addr + lead;
  return 0;
}

static int host_import(const weft__mem_space *s, const weft__mem_handle *h, weft__mem_mapping *m) {
  return weft__memfd_import(h, m);
}

static void host_unimport(const weft__mem_space *s, weft__mem_mapping *m) {
  if (m->map_addr != NULL) munmap(m->map_addr, m->map_len);
  memset(m, 0, sizeof *m);
}

const weft__mem_space weft__mem_host = {
    .name = "host",
    .kind = WEFT__MEM_HOST,
    .flags = WEFT__MEM_SYNC,
    .copy = host_copy,
    .reduce = host_reduce,
    .avg = host_avg,
    .fill = host_fill,
    .reduce_fanout = host_reduce_fanout,
    .wait = host_wait,
    .host_view = host_view,
    .alloc = host_alloc,
    .free = host_free,
    .owns = host_owns,
    .export_buf = host_export,
    .import_buf = host_import,
    .unimport = host_unimport,
};

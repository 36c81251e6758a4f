/* guarded.c: the guarded memory space, the test suite's proof that the seam holds.
 *
 * A guarded buffer is a memfd mapped twice: at the address the user sees, with no access
 * (PROT_NONE), and at an alias, read-write, that only this space knows. Every operation
 * translates its pointers (mem/space.h: each may be guarded or host memory) to the alias
 * and then does what the host space does. So an algorithm or a transport that touches a
 * user buffer without going through the space faults at once (SIGSEGV), and so does a
 * system call on it (EFAULT): the crash that device memory would give, caught on a CPU.
 * An operation that would run past the end of its guarded buffer aborts, naming it.
 *
 * Peers' buffers imported for the direct algorithms (lib/window.c) are mapped the same
 * way, so those algorithms too must reach their peers through the space. Blocks live in a
 * list under a mutex: tests only, so simplicity beats speed. While no guarded block
 * exists, weft__mem_space_of never gets here (weft__mem_foreign_blocks is 0). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "lib/dtype.h"
#include "lib/status.h"
#include "mem/guarded.h"
#include "mem/host.h"
#include "mem/space.h"

enum { FANOUT_MAX = 64 };

typedef struct guard_block {
  char *user;        /* what callers see: PROT_NONE */
  char *alias;       /* the same pages, read-write */
  size_t bytes;
  int fd;            /* ours; -1 for an imported peer buffer */
  struct guard_block *next;
} guard_block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static guard_block *blocks;

/* The alias of [p, p + n) when p is guarded, else p. */
static void *resolve(const void *p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  void *out = (void *)p;
  pthread_mutex_lock(&lock);
  for (guard_block *b = blocks; b != NULL; b = b->next) {
    uintptr_t lo = (uintptr_t)b->user;
    if (a < lo || a - lo >= b->bytes) continue;
    if (!weft__span_fits(a - lo, n, b->bytes)) {
      fprintf(stderr, "weft guarded memory: %zu bytes at %p run past the end of the %zu-byte "
              "block at %p\n", n, p, b->bytes, (void *)b->user);
      abort();
    }
    out = b->alias + (a - lo);
    break;
  }
  pthread_mutex_unlock(&lock);
  return out;
}

static void add_block(guard_block *b) {
  pthread_mutex_lock(&lock);
  b->next = blocks;
  blocks = b;
  pthread_mutex_unlock(&lock);
  atomic_fetch_add(&weft__mem_foreign_blocks, 1);
}

/* Unlinks the block whose user address is user (imported or not, as asked). */
static guard_block *take_block(const void *user, int imported) {
  pthread_mutex_lock(&lock);
  guard_block **at = &blocks;
  while (*at != NULL && ((*at)->user != user || ((*at)->fd < 0) != imported)) at = &(*at)->next;
  guard_block *b = *at;
  if (b != NULL) *at = b->next;
  pthread_mutex_unlock(&lock);
  if (b != NULL) atomic_fetch_sub(&weft__mem_foreign_blocks, 1);
  return b;
}

/* ---- data: the host space's operations on the aliases ---------------------------------- */

static _Atomic size_t nt_bytes; /* weft__mem_guarded_nt_bytes */

size_t weft__mem_guarded_nt_bytes(void) { return atomic_load(&nt_bytes); }

static void g_copy(const weft__mem_space *s, void *dst, const void *src, size_t n, unsigned flags) {
  void *to = resolve(dst, n);
  if ((flags & WEFT__MEM_NT) && to != dst) atomic_fetch_add(&nt_bytes, n);
  weft__mem_host.copy(&weft__mem_host, to, resolve(src, n), n, flags);
}

static void g_reduce(const weft__mem_space *s, void *dst, const void *a, const void *b, size_t count,
                     weft_datatype_t dt, weft_redop_t op) {
  size_t n = count * weft__dtype_size(dt);
  weft__mem_host.reduce(&weft__mem_host, resolve(dst, n), resolve(a, n), resolve(b, n), count, dt, op);
}

static void g_avg(const weft__mem_space *s, void *buf, size_t count, weft_datatype_t dt, int divisor) {
  weft__mem_host.avg(&weft__mem_host, resolve(buf, count * weft__dtype_size(dt)), count, dt, divisor);
}

static void g_fill(const weft__mem_space *s, void *dst, int byte, size_t n) {
  weft__mem_host.fill(&weft__mem_host, resolve(dst, n), byte, n);
}

static int g_reduce_fanout(const weft__mem_space *s, char *const *out, int nout, char *const *in, int nin,
                           size_t count, weft_datatype_t dt, weft_redop_t op) {
  if (nout > FANOUT_MAX || nin > FANOUT_MAX) return 0;
  char *o[FANOUT_MAX], *i[FANOUT_MAX];
  size_t n = count * weft__dtype_size(dt);
  for (int j = 0; j < nout; j++) o[j] = resolve(out[j], n);
  for (int j = 0; j < nin; j++) i[j] = resolve(in[j], n);
  return weft__mem_host.reduce_fanout(&weft__mem_host, o, nout, i, nin, count, dt, op);
}

static void g_wait(const weft__mem_space *s) { weft__mem_host.wait(&weft__mem_host); }

static void *g_view(const weft__mem_space *s, const void *p, size_t n) { return resolve(p, n); }

/* ---- memory --------------------------------------------------------------------------- */

/* Maps len bytes of fd from off twice: block->user with no access, block->alias read-write. */
static int map_twice(guard_block *b, int fd, off_t off, size_t len) {
  b->alias = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
  if (b->alias == MAP_FAILED) return errno;
  b->user = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, off);
  if (b->user == MAP_FAILED) {
    int e = errno;
    munmap(b->alias, len);
    return e;
  }
  b->bytes = len;
  return 0;
}

static weft_status_t g_alloc(const weft__mem_space *s, size_t size, void **p) {
  *p = NULL;
  guard_block *b = calloc(1, sizeof *b);
  if (b == NULL) return weft__error(NULL, WEFT_ERR_NO_MEMORY, "guarded alloc: out of memory");
  size_t bytes = 0;
  weft_status_t st = weft__memfd_create("weft-guarded", size, &b->fd, &bytes);
  if (st != WEFT_SUCCESS) {
    free(b);
    return st;
  }
  int err = map_twice(b, b->fd, 0, bytes);
  if (err != 0) {
    close(b->fd);
    free(b);
    return weft__error(NULL, WEFT_ERR_NO_MEMORY, "guarded alloc: mmap of %zu bytes: %s", bytes, strerror(err));
  }
  add_block(b);
  *p = b->user;
  return WEFT_SUCCESS;
}

static void unmap_block(guard_block *b) {
  munmap(b->user, b->bytes);
  munmap(b->alias, b->bytes);
  if (b->fd >= 0) close(b->fd);
  free(b);
}

static weft_status_t g_free(const weft__mem_space *s, void *p) {
  if (p == NULL) return WEFT_SUCCESS;
  guard_block *b = take_block(p, 0);
  if (b == NULL) return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "guarded free: %p is no guarded block", p);
  unmap_block(b);
  return WEFT_SUCCESS;
}

static int g_owns(const weft__mem_space *s, const void *p) {
  uintptr_t a = (uintptr_t)p;
  int found = 0;
  pthread_mutex_lock(&lock);
  for (guard_block *b = blocks; b != NULL && !found; b = b->next)
    found = a >= (uintptr_t)b->user && a - (uintptr_t)b->user < b->bytes;
  pthread_mutex_unlock(&lock);
  return found;
}

static int g_export(const weft__mem_space *s, const void *p, size_t bytes, weft__mem_handle *h) {
  uintptr_t a = (uintptr_t)p;
  int found = 0;
  pthread_mutex_lock(&lock);
  for (guard_block *b = blocks; b != NULL && !found; b = b->next) {
    uintptr_t lo = (uintptr_t)b->user;
    if (b->fd < 0 || a < lo || !weft__span_fits(a - lo, bytes, b->bytes)) continue;
    *h = (weft__mem_handle){.pid = (int32_t)getpid(), .fd = b->fd, .offset = (uint64_t)(a - lo), .bytes = bytes};
    found = 1;
  }
  pthread_mutex_unlock(&lock);
  return found;
}

static int g_import(const weft__mem_space *s, const weft__mem_handle *h, weft__mem_mapping *m) {
  memset(m, 0, sizeof *m);
  size_t start = 0, lead = 0;
  int fd, err = weft__memfd_open(h, &start, &lead, &fd);
  if (err != 0) return err;
  guard_block *b = calloc(1, sizeof *b);
  err = b == NULL ? ENOMEM : map_twice(b, fd, (off_t)start, lead + (size_t)h->bytes);
  close(fd);
  if (err != 0) {
    free(b);
    return err;
  }
  b->fd = -1;
  add_block(b);
  m->base = b->user + lead;
  m->map_addr = b->user;
  m->map_len = b->bytes;
  return 0;
}

static void g_unimport(const weft__mem_space *s, weft__mem_mapping *m) {
  guard_block *b = m->map_addr != NULL ? take_block(m->map_addr, 1) : NULL;
  if (b != NULL) unmap_block(b);
  memset(m, 0, sizeof *m);
}

const weft__mem_space weft__mem_guarded = {
    .name = "guarded",
    .kind = WEFT__MEM_GUARDED,
    .flags = WEFT__MEM_SYNC,
    .copy = g_copy,
    .reduce = g_reduce,
    .avg = g_avg,
    .fill = g_fill,
    .reduce_fanout = g_reduce_fanout,
    .wait = g_wait,
    .host_view = g_view,
    .alloc = g_alloc,
    .free = g_free,
    .owns = g_owns,
    .export_buf = g_export,
    .import_buf = g_import,
    .unimport = g_unimport,
};

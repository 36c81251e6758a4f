/* mem.c: weft_mem_alloc / weft_mem_free: memory other processes of the host can map.
 *
 * Each block is its own memfd (anonymous, close-on-exec), mapped MAP_SHARED. The fd stays
 * open while the block lives, so a peer can open it as /proc/<our pid>/fd/<fd> and map the
 * same pages (lib/window.c); the kernel frees the pages when the last mapping and fd go.
 * A process-wide list, under a mutex, maps pointers back to their block: registration is
 * rare, so a list is enough. Same idea as NCCL's ncclMemAlloc (cuMem with a shareable
 * handle); no code taken. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "weft.h"
#include "lib/map_colour.h"
#include "lib/mem.h"
#include "lib/status.h"

typedef struct mem_block {
  char *base;
  size_t bytes; /* mapped length: the request rounded up to pages */
  int fd;
  struct mem_block *next;
} mem_block;

static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_block *blocks;

weft_status_t weft_mem_alloc(void **ptr, size_t size) {
  if (ptr == NULL || size == 0)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_mem_alloc: %s",
                       ptr == NULL ? "ptr is NULL" : "size is 0");
  *ptr = NULL;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (size > SIZE_MAX - page)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_mem_alloc: size %zu too large", size);
  size_t bytes = (size + page - 1) / page * page;
  mem_block *b = calloc(1, sizeof *b);
  if (b == NULL) return weft__error(NULL, WEFT_ERR_NO_MEMORY, "weft_mem_alloc: out of memory");
  b->fd = memfd_create("weft-mem", MFD_CLOEXEC);
  if (b->fd < 0) {
    int e = errno;
    free(b);
    return weft__error(NULL, WEFT_ERR_SYSTEM, "weft_mem_alloc: memfd_create: %s", strerror(e));
  }
  if (ftruncate(b->fd, (off_t)bytes) != 0) {
    int e = errno;
    close(b->fd);
    free(b);
    return weft__error(NULL, WEFT_ERR_SYSTEM, "weft_mem_alloc: ftruncate to %zu bytes: %s", bytes,
                       strerror(e));
  }
  void *base = weft__map_coloured(bytes, b->fd, 0); /* why: lib/map_colour.h */
  if (base == MAP_FAILED) {
    int e = errno;
    close(b->fd);
    free(b);
    return weft__error(NULL, e == ENOMEM ? WEFT_ERR_NO_MEMORY : WEFT_ERR_SYSTEM,
                       "weft_mem_alloc: mmap of %zu bytes: %s", bytes, strerror(e));
  }
  b->base = base;
  b->bytes = bytes;
  pthread_mutex_lock(&blocks_lock);
  b->next = blocks;
  blocks = b;
  pthread_mutex_unlock(&blocks_lock);
  *ptr = base;
  return WEFT_SUCCESS;
}

weft_status_t weft_mem_free(void *ptr) {
  if (ptr == NULL) return WEFT_SUCCESS;
  pthread_mutex_lock(&blocks_lock);
  mem_block **at = &blocks;
  while (*at != NULL && (*at)->base != ptr) at = &(*at)->next;
  mem_block *b = *at;
  if (b != NULL) *at = b->next;
  pthread_mutex_unlock(&blocks_lock);
  if (b == NULL)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT,
                       "weft_mem_free: %p was not returned by weft_mem_alloc", ptr);
  munmap(b->base, b->bytes);
  close(b->fd);
  free(b);
  return WEFT_SUCCESS;
}

int weft__mem_lookup(const void *p, size_t bytes, int *fd, size_t *offset) {
  uintptr_t a = (uintptr_t)p;
  int found = 0;
  pthread_mutex_lock(&blocks_lock);
  for (const mem_block *b = blocks; b != NULL && !found; b = b->next) {
    uintptr_t lo = (uintptr_t)b->base;
    if (a >= lo && weft__span_fits(a - lo, bytes, b->bytes)) {
      *fd = b->fd;
      *offset = (size_t)(a - lo);
      found = 1;
    }
  }
  pthread_mutex_unlock(&blocks_lock);
  return found;
}

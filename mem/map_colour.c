/* map_colour.c: see map_colour.h. */
#include "mem/map_colour.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define COLOUR_STEP WEFT__COLOUR_STEP
#define COLOUR_SPAN WEFT__COLOUR_SPAN
#define COLOUR_COUNT (COLOUR_SPAN / COLOUR_STEP) /* 256 */
#define COLOUR_STRIDE 37 /* odd: consecutive calls land far apart, all 256 used in turn */

static atomic_uint next_colour;

void *weft__map_coloured(size_t len, int fd, off_t off) {
  if (len == 0 || len > SIZE_MAX - 2 * COLOUR_SPAN) {
    return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off); /* mmap's own error */
  }
  /* Reserve len + 16 MiB of address space (no memory), pick the address inside it with the
   * wanted residue modulo 16 MiB, map the file there, and give back the rest. */
  size_t span = len + COLOUR_SPAN;
  char *res = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (res == MAP_FAILED) return MAP_FAILED;
  unsigned k = atomic_fetch_add_explicit(&next_colour, 1, memory_order_relaxed);
  uintptr_t want = (uintptr_t)((k * COLOUR_STRIDE) % COLOUR_COUNT) * COLOUR_STEP;
  uintptr_t lo = (uintptr_t)res;
  uintptr_t at = lo - lo % COLOUR_SPAN + want;
  if (at < lo) at += COLOUR_SPAN; /* now lo <= at < lo + 16 MiB */
  char *m = mmap((void *)at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off);
  if (m == MAP_FAILED) {
    int e = errno;
    munmap(res, span);
    errno = e;
    return MAP_FAILED;
  }
  if (at > lo) munmap(res, at - lo);
  size_t page = (size_t)sysconf(_SC_PAGESIZE), mapped = (len + page - 1) / page * page;
  size_t tail = (size_t)(lo + span - (at + mapped)); /* the reservation's end is page aligned */
  if (tail > 0) munmap((char *)at + mapped, tail);
  return m;
}

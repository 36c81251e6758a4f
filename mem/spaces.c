/* spaces.c: which space a pointer belongs to (mem/space.h, weft__mem_space_of), as
 * cudaPointerGetAttributes answers it for CUDA. The host space is the default; the others
 * are asked in turn, and only while one of them holds a block at all, so host-only
 * programs pay one relaxed load per call. A new space adds itself to `others`. */
#include "mem/guarded.h"
#include "mem/space.h"
#ifdef WEFT_HAVE_CUDA
#include "mem/cuda.h"
#endif

atomic_long weft__mem_foreign_blocks;

static const weft__mem_space *const others[] = {
    &weft__mem_guarded,
#ifdef WEFT_HAVE_CUDA
    &weft__mem_cuda, /* asks the driver only once armed (mem/cuda.h) */
#endif
};

const weft__mem_space *weft__mem_space_lookup(const void *p) {
  if (p == NULL) return &weft__mem_host;
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
    if (others[i]->owns(others[i], p)) return others[i];
  return &weft__mem_host;
}

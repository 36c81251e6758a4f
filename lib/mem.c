/* mem.c: weft_mem_alloc / weft_mem_free, the public face of the memory spaces: memory
 * other processes of the host can map (registered windows, lib/window.c). The memory
 * comes from the host space (mem/host.c: one memfd per block); weft_mem_free returns a
 * block to whichever space it came from. */
#include "weft.h"
#include "lib/status.h"
#include "mem/space.h"

weft_status_t weft_mem_alloc(void **ptr, size_t size) {
  if (ptr == NULL || size == 0)
    return weft__error(NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_mem_alloc: %s",
                       ptr == NULL ? "ptr is NULL" : "size is 0");
  return weft__mem_host.alloc(&weft__mem_host, size, ptr);
}

weft_status_t weft_mem_free(void *ptr) {
  if (ptr == NULL) return WEFT_SUCCESS;
  const weft__mem_space *s = weft__mem_space_of(ptr);
  return s->free(s, ptr);
}

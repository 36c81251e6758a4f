/* mem.h: weft_mem_alloc's registry: which memfd and offset back a pointer, so a window
 * (lib/window.c) can tell its peers how to map it. */
#ifndef WEFT_LIB_MEM_H
#define WEFT_LIB_MEM_H
#include <stddef.h>

/* If [p, p + bytes) lies inside one weft_mem_alloc block: 1, with *fd the block's memfd
 * (open for the life of the block) and *offset the offset of p in it. Else 0.
 * Thread-safe. */
int weft__mem_lookup(const void *p, size_t bytes, int *fd, size_t *offset);

/* Whether bytes bytes at offset off fit inside a region of size bytes, without overflow
 * (the check weft_mem_alloc blocks, windows and peers' descriptors all need). Pure. */
static inline int weft__span_fits(size_t off, size_t bytes, size_t size) {
  return bytes <= size && off <= size - bytes;
}
#endif

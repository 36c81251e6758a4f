/* guarded.h: the guarded memory space (mem/guarded.c), for tests: buffers whose address
 * faults on any direct access, reachable only through the space's operations.
 *   void *buf;
 *   weft__mem_guarded.alloc(&weft__mem_guarded, bytes, &buf);     // pass buf to weft
 *   char *mine = weft__mem_guarded.host_view(&weft__mem_guarded, buf, bytes); // the test's own access
 *   weft__mem_guarded.free(&weft__mem_guarded, buf);
 * weft_mem_free(buf) frees it too, and weft_comm_window_register accepts it. */
#ifndef WEFT_MEM_GUARDED_H
#define WEFT_MEM_GUARDED_H
#include "mem/space.h"

extern const weft__mem_space weft__mem_guarded;

/* Bytes this process has copied into guarded memory with non-temporal stores
 * (WEFT__MEM_NT) so far: lets a test see which copies bypass the cache. Thread-safe. */
size_t weft__mem_guarded_nt_bytes(void);
#endif

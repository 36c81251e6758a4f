/* nt_copy.h: a copy that bypasses the cache, for large received messages.
 *
 * Why: a receiving rank copies each message out of the shared-memory FIFO (cache-hot) into
 * the caller's buffer. When that buffer is larger than the caches it is not read again soon,
 * and ordinary stores first read every destination line from DRAM (read for ownership), so
 * the copy moves 3 bytes of DRAM traffic per byte instead of 2. Non-temporal stores write
 * whole lines without reading them: perf/membw_floor measured plain stores and memcpy 25-45%
 * slower than them at 16-256 MiB on the 2-core development VM. Below the threshold ordinary
 * memcpy wins (the data stays in cache for whoever reads it next). */
#ifndef WEFT_MEM_NT_COPY_H
#define WEFT_MEM_NT_COPY_H

#include <stddef.h>

/* Copies n bytes like memcpy (regions must not overlap), with non-temporal stores on x86-64
 * and memcpy elsewhere. Ends with a store fence, so the bytes are ordered before any later
 * store that publishes them to another thread. Thread-safe. */
void weft__nt_copy(void *dst, const void *src, size_t n);

/* weft__nt_copy without its fence, for a caller that copies many pieces and then
 * calls weft__store_fence once before publishing them: a fence per piece stalls until
 * the write-combining buffers drain. Thread-safe. */
void weft__nt_copy_unfenced(void *dst, const void *src, size_t n);
/* Orders every earlier store, non-temporal ones included, before later stores. */
void weft__store_fence(void);

/* The size from which the host space bypasses the cache: weft__mem_nt_threshold
 * (mem/space.h), defined in nt_copy.c. */

#endif

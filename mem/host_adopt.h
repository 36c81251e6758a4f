/* host_adopt.h: a plain buffer (the user's malloc'd memory) made importable by peers, so
 * weft_comm_window_register takes ordinary memory, as ncclCommRegister takes any buffer.
 *
 * Linux lets no other process map a process's private anonymous pages, so adopting a
 * buffer moves its whole pages into a memfd: the pages lying entirely inside
 * [p, p + bytes) (the interior) are copied into the memfd and the memfd is mapped over
 * them at the same address (mremap onto it: the swap is atomic), so the program sees the
 * same bytes at the same address, now shared with whoever maps the memfd. The partial
 * pages at the two ends (the edges) stay private: they may hold other allocations that
 * other threads write at any time, which a copy-and-remap would lose. The memfd covers the
 * whole pages [floor(p), ceil(p + bytes)), so its first and last pages are shadows of the
 * edges; the direct algorithms reach every byte of an adopted buffer through a view (a
 * mapping of the whole memfd: ours from weft__adopted_view, a peer's from importing the
 * handle), and weft__adopted_sync copies the edges' bytes between the program's memory
 * and the shadows around a call. The idea of making private memory shareable by
 * substituting a shared mapping follows XPMEM's and KNEM's goal (single-copy access to a
 * peer's buffers); the remap itself is our own, no code taken.
 *
 * What it changes for the program until released (weft.h, weft_comm_window_register):
 * the interior is a shared mapping, so a child forked meanwhile shares those pages instead
 * of copying them, and the buffer must not be freed, reallocated, unmapped or madvised
 * before the registration ends. Releasing the last adoption of a buffer puts private
 * anonymous pages with the same bytes back (mremap again), when the interior is still the
 * mapping adoption made; if the program unmapped it meanwhile, release leaves that alone.
 *
 * Thread safety: every function is thread-safe (one process-wide list under a mutex); a
 * buffer must not be read or written by the program while it is adopted or released. */
#ifndef WEFT_MEM_HOST_ADOPT_H
#define WEFT_MEM_HOST_ADOPT_H
#include <stddef.h>
#include "mem/space.h"

typedef struct weft__adopted weft__adopted;

/* weft__host_adopt's outcomes besides 0 (adopted) and a positive errno (a system call
 * failed: memfd_create, ftruncate, mmap, mremap). */
enum {
  WEFT__ADOPT_NOT_PRIVATE = -1, /* some page of the buffer is not private anonymous,
                                   writable memory (a file, a memfd, the stack) */
  WEFT__ADOPT_OVERLAP = -2      /* [p, p + bytes) overlaps an adopted buffer without lying
                                   inside it */
};

/* Adopts [p, p + bytes) (bytes > 0) or, when it lies inside a buffer already adopted,
 * takes another reference on that one; *a is the adoption. Costs a copy of the interior
 * and its page faults (about one memcpy of bytes) on first adoption; setup, never the
 * data path. Returns 0, WEFT__ADOPT_NOT_PRIVATE, WEFT__ADOPT_OVERLAP or an errno. */
int weft__host_adopt(void *p, size_t bytes, weft__adopted **a);
/* weft__host_adopt, then *h as weft__adopted_export fills it for the whole buffer: what
 * the registrations (lib/window.c, lib/reg.c) all do. The same outcomes; *a only on 0. */
int weft__host_adopt_export(void *p, size_t bytes, weft__adopted **a, weft__mem_handle *h);
/* Why an outcome of weft__host_adopt other than 0 refused the buffer, as a phrase that
 * completes "the buffer ...". */
const char *weft__host_adopt_why(int outcome);
/* Whether every page of [p, p + bytes) is private anonymous writable memory, the heap
 * included, the main thread's stack not: what adoption takes (reads /proc/self/maps). */
int weft__host_adoptable(const void *p, size_t bytes);
/* Drops a reference; the last one restores private pages (above) and frees a. */
void weft__host_adopt_release(weft__adopted *a);
/* The handle a peer imports (weft__memfd_import) to reach [p, p + bytes) of a through its
 * own view, shadows included; 0 when that span is not inside a's buffer. */
int weft__adopted_export(const weft__adopted *a, const void *p, size_t bytes, weft__mem_handle *h);
/* Where p (inside a's buffer) is in this process's view of a. */
char *weft__adopted_view(const weft__adopted *a, const void *p);
/* Copies the bytes of [p, p + n) that lie in a's edges from the program's memory into
 * the view's shadows (to_view 1: before peers read them) or back (to_view 0: after
 * peers wrote them). At most two pages; nothing when the span misses the edges. */
void weft__adopted_sync(const weft__adopted *a, const void *p, size_t n, int to_view);
/* The adoption holding [p, p + bytes), or NULL (tests). */
weft__adopted *weft__adopted_find(const void *p, size_t bytes);
#endif

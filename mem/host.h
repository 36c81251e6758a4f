/* host.h: the memfd helpers the host space (mem/host.c) shares with the guarded one
 * (mem/guarded.c): both keep their blocks in memfds that peers map. */
#ifndef WEFT_MEM_HOST_H
#define WEFT_MEM_HOST_H
#include <stddef.h>
#include "weft.h"
#include "mem/space.h"

/* A close-on-exec memfd of size rounded up to pages (*bytes), named name in /proc/pid/maps.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (too large), WEFT_ERR_SYSTEM, naming `name`. */
weft_status_t weft__memfd_create(const char *name, size_t size, int *fd, size_t *bytes);
/* Opens the memfd h names (/proc/<pid>/fd/<fd>, read-write) into *fd and splits h's offset
 * into the page it starts in (*start) and the bytes before it there (*lead). 0 or an errno. */
int weft__memfd_open(const weft__mem_handle *h, size_t *start, size_t *lead, int *fd);
/* Maps the buffer h describes (read-write, at a fresh colour: mem/map_colour.h) by opening
 * /proc/<pid>/fd/<fd>. Returns 0 or an errno. */
int weft__memfd_import(const weft__mem_handle *h, weft__mem_mapping *m);
#endif

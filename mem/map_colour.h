/* map_colour.h: mmap at an address whose low bits differ from weft's other mappings.
 *
 * Why: on AMD Zen the L1 data cache's way predictor tags lines by a hash of linear-address
 * bits 12-27 ("utag"; Lipp et al., "Take A Way", AsiaCCS 2020). Two streams whose
 * addresses differ by an exact multiple of 256 MiB share every utag, so they evict each
 * other from L1 on every access. The kernel places same-sized mappings back to back, so
 * weft_mem_alloc blocks of 256 MiB sat exactly 256 MiB apart, and so did the peers'
 * windows mapped beside them. Measured on this VM (AMD EPYC, 2 threads, fused all-reduce
 * loop over 16 MiB per buffer, 4 buffers): 6.5-7.4 GB/s with the buffers 256, 512 or
 * 1024 MiB apart, 10.6-15.7 with them 16, 64, 128, 192, 258 or 256 MiB + 4 KiB apart.
 * Each mapping made here starts at a different multiple of 64 KiB modulo 16 MiB, so the
 * distance between any two of them is never within 64 KiB of a multiple of 256 MiB. */
#ifndef WEFT_MEM_MAP_COLOUR_H
#define WEFT_MEM_MAP_COLOUR_H
#include <stddef.h>
#include <sys/types.h>

/* mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off), placed at the next colour
 * (64 KiB step, 256 colours, one per call in turn): len bytes of fd from off (a multiple
 * of the page size) at an address that is 64 KiB aligned. Needs 16 MiB of free address
 * space beyond len for a moment. Returns the address, or MAP_FAILED with errno set
 * (mmap's errors: ENOMEM, EACCES, EINVAL, ...). Unmap with munmap(addr, len).
 * Thread-safe (the colour counter is atomic). */
void *weft__map_coloured(size_t len, int fd, off_t off);

#define WEFT__COLOUR_STEP ((size_t)64 << 10) /* the distance between colours */
#define WEFT__COLOUR_SPAN ((size_t)16 << 20) /* colours repeat every 16 MiB */

#endif

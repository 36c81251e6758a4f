/* test_mem.c: weft_mem_alloc's placement (mem/map_colour.h) and weft__map_coloured itself.
 *
 * Why placement is tested: on AMD Zen, buffers an exact multiple of 256 MiB apart evict each
 * other from L1 (map_colour.h), and the kernel put same-sized blocks back to back, so
 * 256 MiB blocks read half the bandwidth. Blocks of 16 MiB, back to back, would share every
 * colour; each must now start at its own multiple of 64 KiB modulo 16 MiB. Only address
 * space is used: no page of the blocks is touched but the two ends. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>
#include "weft.h"
#include "mem/map_colour.h"

enum { NBLOCKS = 16 };
#define MIB ((size_t)1 << 20)

/* Whether a and b are at least 64 KiB apart modulo 16 MiB (so never within 64 KiB of a
 * multiple of 256 MiB). */
static int colours_differ(uintptr_t a, uintptr_t b) {
  size_t d = (size_t)((a > b ? a - b : b - a) % WEFT__COLOUR_SPAN);
  return d >= WEFT__COLOUR_STEP && d <= WEFT__COLOUR_SPAN - WEFT__COLOUR_STEP;
}

static void blocks_of_one_size_get_distinct_colours(void **state) {
  (void)state;
  void *p[NBLOCKS];
  for (int i = 0; i < NBLOCKS; i++) {
    assert_int_equal(weft_mem_alloc(&p[i], 16 * MIB), WEFT_SUCCESS);
    assert_int_equal((uintptr_t)p[i] % WEFT__COLOUR_STEP, 0);
    ((char *)p[i])[0] = (char)i; /* both ends are ours */
    ((char *)p[i])[16 * MIB - 1] = (char)i;
  }
  for (int i = 0; i < NBLOCKS; i++)
    for (int j = 0; j < i; j++) {
      if (!colours_differ((uintptr_t)p[i], (uintptr_t)p[j]))
        fail_msg("blocks %d (%p) and %d (%p) share a colour", i, p[i], j, p[j]);
    }
  for (int i = 0; i < NBLOCKS; i++) {
    assert_int_equal(((char *)p[i])[16 * MIB - 1], (char)i);
    assert_int_equal(weft_mem_free(p[i]), WEFT_SUCCESS);
  }
}

/* A peer window maps part of a block: from a page-aligned offset, a length that is not a
 * multiple of the page. The mapping must show the file's bytes there and be writable
 * through to the file. */
static void coloured_mapping_of_a_file_range_shows_its_bytes(void **state) {
  (void)state;
  size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = 3 * MIB, off = 5 * page, len = MIB + 123;
  int fd = memfd_create("weft-test", MFD_CLOEXEC);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)bytes), 0);
  unsigned char *whole = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  assert_true(whole != MAP_FAILED);
  for (size_t i = 0; i < bytes; i++) whole[i] = (unsigned char)(i * 7 + 3);
  unsigned char *m[3];
  for (int k = 0; k < 3; k++) {
    m[k] = weft__map_coloured(len, fd, (off_t)off);
    assert_true(m[k] != MAP_FAILED);
    assert_memory_equal(m[k], whole + off, len);
    for (int j = 0; j < k; j++) assert_true(colours_differ((uintptr_t)m[k], (uintptr_t)m[j]));
  }
  m[1][len - 1] ^= 0xff;
  assert_int_equal(whole[off + len - 1], (unsigned char)(((off + len - 1) * 7 + 3) ^ 0xff));
  for (int k = 0; k < 3; k++) assert_int_equal(munmap(m[k], len), 0);
  munmap(whole, bytes);
  close(fd);
}

static void coloured_mapping_of_a_bad_fd_fails_with_errno(void **state) {
  (void)state;
  errno = 0;
  assert_true(weft__map_coloured(MIB, -1, 0) == MAP_FAILED);
  assert_int_equal(errno, EBADF);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(blocks_of_one_size_get_distinct_colours),
      cmocka_unit_test(coloured_mapping_of_a_file_range_shows_its_bytes),
      cmocka_unit_test(coloured_mapping_of_a_bad_fd_fails_with_errno),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

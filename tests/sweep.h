/* sweep.h: the collective sweep shared by test_collectives.c (host memory) and
 * test_guarded.c (the guarded memory space): one communicator runs all_reduce, broadcast,
 * reduce, all_gather, reduce_scatter and all_to_all over every datatype, every op, the
 * counts below, in place and out of place, every root (see sweep.c), against a reference
 * each rank computes locally, with guard bytes around every buffer, unchanged send buffers
 * and results bitwise identical on every rank. */
#ifndef WEFT_TESTS_SWEEP_H
#define WEFT_TESTS_SWEEP_H
#include <stddef.h>

typedef struct {
  int nranks;
  const char *transport;
  size_t chunk_bytes; /* 0: the library's default */
  size_t big_bytes;   /* the large count is big_bytes / element size + 3 */
  int windows;        /* 1: buffers come from a registered window, so collectives run
                         direct (algos/direct.h) from 1 byte on; 2: the same, but the last
                         rank takes every 3rd buffer outside the window, so calls with it
                         fall back to the usual algorithm on every rank; 3: as 1, but
                         the window is plain malloc'd memory starting mid-page, which
                         registration adopts (mem/host_adopt.h), so the first buffers lie
                         in its head edge; 4: as 3, but registered on each rank alone
                         (weft_comm_register, lib/reg.h) */
  int guarded;        /* 1: every user buffer lies in the guarded memory space
                         (mem/guarded.h): any direct touch by weft faults */
  const char *algo;   /* WEFT_ALGO for the ranks (NULL: the tuner's choice) */
  const char *hosts;  /* emulated hosts, one letter per rank (WEFT_HOSTID), or NULL */
  int quick;          /* 1: counts 0, 1, 7, 4097 and the large one; 0: also 2, 3, 5, 4095 */
  const char *caps;   /* WEFT_TRANSPORT_CAPS for the ranks (NULL: every capability): "0"
                         shows the core assumes none of the optional ones */
} sweep_params;

/* A cmocka test: runs the sweep *state (a sweep_params) on real rank processes. */
void sweep_run(void **state);
#endif

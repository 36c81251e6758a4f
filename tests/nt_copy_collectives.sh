#!/bin/sh
# Messages of 16 MiB and more are delivered with non-temporal stores (mem/nt_copy.h),
# sizes the collective sweep reaches only at its top. CI therefore runs the shm half of the
# sweep with the threshold at 1 byte, so every received message, all-gather's own block,
# all-to-all's self block and the broadcast root's copy take that path, and every
# out-of-place ring all-reduce keeps its partials in scratch (weft__ring_nt_output).
# WEFT_PROTO=Simple keeps the smallest messages off the LL protocol, so they take it too.
# WEFT_SHM_NT_COPY=1 makes senders write FIFO payloads of 2 KiB messages and up past the
# cache too, as they do when the placement probe finds two L3s (shm_placement.h).
# TAP comes from the cmocka program itself.
cd "${WEFT_TOP_BUILDDIR:-.}" || exit 1
WEFT_PROTO=Simple WEFT_NT_COPY_BYTES=1 WEFT_SHM_NT_COPY=1 WEFT_TEST_FILTER='*over_shm*' exec ./tests/test_collectives

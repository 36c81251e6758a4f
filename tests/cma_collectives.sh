#!/bin/sh
# The single-copy (CMA) shm path: by default only all-gather and all-to-all(v) messages of
# 64 KiB and more take it (lib/req.h), so CI runs the shm half of the collective sweep with
# every message on it (WEFT_SHM_CMA_CALLS=all, WEFT_SHM_CMA_BYTES=1), reductions included.
# WEFT_PROTO=Simple keeps the smallest messages off the LL protocol, so they take it too.
# TAP comes from the cmocka program itself.
cd "${WEFT_TOP_BUILDDIR:-.}" || exit 1
WEFT_PROTO=Simple WEFT_SHM_CMA_CALLS=all WEFT_SHM_CMA_BYTES=1 WEFT_TEST_FILTER='*over_shm*' exec ./tests/test_collectives

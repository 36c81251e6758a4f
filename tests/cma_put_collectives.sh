#!/bin/sh
# Puts on the single-copy shm path (transports/shm/shm_fifo.h): by default only broadcast
# messages of calls from 64 KiB go as puts, and only where the copy probe measured one copy
# faster (lib/req.h), which a CI machine may not. So CI runs the shm half of the collective
# sweep with every message on one copy and each one of two pages or more as a put
# (WEFT_SHM_CMA_CALLS=put, WEFT_SHM_CMA_BYTES=1): the receiver reads the first half while
# the sender writes the rest; reducing receives decline the put and read it whole.
# WEFT_PROTO=Simple keeps the smallest messages off the LL protocol. TAP comes from the
# cmocka program itself.
cd "${WEFT_TOP_BUILDDIR:-.}" || exit 1
WEFT_PROTO=Simple WEFT_SHM_CMA_CALLS=put WEFT_SHM_CMA_BYTES=1 WEFT_TEST_FILTER='*over_shm*' exec ./tests/test_collectives

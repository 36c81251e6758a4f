#!/bin/sh
# multihost_shrink.sh: TAP test of weft_comm_shrink across 2 emulated hosts with 2 ranks each
# (network namespaces, tests/multihost_lib.sh), launched torchrun-style so that rank 0's
# process hosts the bootstrap root: one rank SIGKILLs itself mid-run (rank 0, root and all,
# then rank 3 on the other host), and the three survivors, on both hosts, shrink with
# WEFT_SHRINK_FAILED over the veth links and check the new communicator (tests/shrink_across.c).
# A few seconds.
# shellcheck disable=SC2034 # read by multihost_lib.sh
LAYOUT="2 2"
# shellcheck source=tests/multihost_lib.sh
. "$(dirname "$0")/multihost_lib.sh"
[ -x ./tests/shrink_across ] || mh_skip_all "tests/shrink_across not built"

echo "1..2"
for victim in 0 3; do
  mh_torchrun WEFT_TIMEOUT_MS=20000 -- ./tests/shrink_across $victim
  oks=$(grep -c "shrink ok: 3 ranks" "$mh_out")
  if [ "$oks" -eq 3 ]; then
    mh_ok "rank $victim SIGKILLed: 3 survivors on 2 hosts shrank ($(grep -o '[0-9.]* ms' "$mh_out" | tr '\n' ' '))"
  else
    mh_not_ok "rank $victim SIGKILLed: $oks of 3 survivors shrank"
  fi
done
mh_done

#!/bin/sh
# torch_backend.sh (make check): weft_torch's own tests (test_backend.py), DDP on weft against
# DDP on gloo (test_ddp_vs_gloo.py) and a subset of PyTorch's distributed tests
# (run_dist_tests.sh subset; `make torch-dist-tests` runs them all). Skips, saying why, where
# Debian's torch or the built extension is missing. TAP.
set -u
src=${srcdir:-.}
here=$src/bindings/torch/tests
pp=$(pwd)/bindings/torch
py=${TORCH_PYTHON:-/usr/bin/python3}
if [ -n "${WEFT_TORCH_SKIP:-}" ]; then
  echo "1..0 # SKIP $WEFT_TORCH_SKIP"; exit 0
fi
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "1..0 # SKIP $py has no torch (Debian's python3-torch: tools/install-deps.sh)"; exit 0
fi
if [ ! -f "$pp/.built" ]; then
  echo "1..0 # SKIP weft_torch was not built (pybind11-dev or libtorch-dev missing: tools/install-deps.sh)"; exit 0
fi
echo "1..3"
n=0; bad=0
step() {
  n=$((n + 1)); name=$1; shift
  if "$@" >"bindings/torch/$name.log" 2>&1; then echo "ok $n - $name"
  else bad=1; echo "not ok $n - $name"; sed 's/^/# /' "bindings/torch/$name.log" | grep -v "^# INFO" | tail -40; fi
  grep -E "^(ok|not ok) |passed, |^# test_[A-Za-z0-9_]+: (FAIL|ERROR|no result|not run)$" "bindings/torch/$name.log" | sed 's/^/#   /'
}
step backend_collectives_subgroups_timeouts_failures env PYTHONPATH="$pp" "$py" "$here/test_backend.py"
step ddp_on_weft_equals_ddp_on_gloo env PYTHONPATH="$pp" "$py" "$here/test_ddp_vs_gloo.py" \
  "$src/trainers/bench/torch_gpt.py" "$src/../shared/data/tinyshakespeare.txt"
# The whole log of PyTorch's tests (every rank's output) stays in the build tree.
step pytorch_distributed_tests_subset env DIST_TESTS_LOG="$(pwd)/bindings/torch/pytorch_distributed_tests_subset.full.log" \
  sh "$here/run_dist_tests.sh" "$pp" subset
exit $bad

#!/bin/sh
# trainers/bench/install-torch.sh: installs the PyTorch peer of `make bench-trainers`.
# Debian's python3-torch (1.13, CPU) only RECOMMENDS a BLAS: without OpenBLAS it falls back
# to the reference BLAS and trains ~18x slower, which would make the comparison meaningless,
# so libopenblas0-pthread is installed with it. Needs root.
set -eu
if [ "$(id -u)" != 0 ]; then
  echo "install-torch.sh: run as root (sudo $0)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y --no-install-recommends python3-torch libopenblas0-pthread
/usr/bin/python3 -c 'import torch; print("torch", torch.__version__, "installed")'

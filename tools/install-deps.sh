#!/bin/sh
# Installs the Debian packages weft needs to build and test, only those that are missing.
# Needs root (or sudo) the first time; does nothing when everything is present.
# python3-torch, libtorch-dev, pybind11-dev and python3-dev build and test weft_torch, the
# PyTorch backend (bindings/torch; 178 packages, 42 s to install on the 2-core VM from a warm
# apt cache); libopenblas0-pthread keeps torch's CPU matmuls off the reference BLAS.
set -eu
need=""
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in build-essential autoconf automake libtool pkg-config libcmocka-dev libhwloc-dev libudev-dev libpmix-dev libxml2-dev libopenblas-dev iproute2 procps util-linux openmpi-bin slurmctld slurmd slurm-client munge libibverbs-dev \
         python3-torch libtorch-dev pybind11-dev python3-dev libopenblas0-pthread; do
  have "$p" || need="$need $p"
done
[ -z "$need" ] && exit 0
echo "install-deps: installing:$need"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $need

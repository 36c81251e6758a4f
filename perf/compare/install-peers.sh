#!/bin/bash
# install-peers.sh: installs what `make compare` needs to run weft's peers: Open MPI
# (mpicc, mpirun), Gloo's headers and library, and matplotlib for the plot; all from
# Debian's packages. Idempotent: only missing packages are installed, and
# `apt-get update` runs only when something is missing. Needs root (or sudo).
#
#   bash perf/compare/install-peers.sh
#
# Kept apart from tools/install-deps.sh because weft itself needs none of this.
set -eu

PKGS="openmpi-bin libopenmpi-dev libgloo-dev python3-matplotlib"

missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "install-peers: all installed ($PKGS)"
  exit 0
fi

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "install-peers: installing$missing"
$SUDO apt-get update -qq
# shellcheck disable=SC2086 # a list of package names
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing

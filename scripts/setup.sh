#!/usr/bin/env bash
# Installs what rdmakit needs to build and test on Debian 12 (root or sudo), and any packages
# given as arguments. Usage: scripts/setup.sh [package...]
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache python3 pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev libasio-dev libcli11-dev nlohmann-json3-dev valgrind
  libibverbs-dev librdmacm-dev libssl-dev
  ibverbs-utils rdmacm-utils perftest python3-pyverbs
  ucx-utils libfabric-bin iperf3 iproute2 procps python3-matplotlib openmpi-bin libopenmpi-dev
  "$@"
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

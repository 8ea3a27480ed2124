#!/usr/bin/env bash
# Installs the RPC peers that bench/rpc_vs_peers.py compares with (Debian 12), then builds them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
packages=(libzmq3-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
          libcapnp-dev capnproto)
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
cmake --preset default >/dev/null
cmake --build --preset default --target rdmakit_tool rpc_call_cost rpc_floors zmq_rpc grpc_rpc capnp_rpc

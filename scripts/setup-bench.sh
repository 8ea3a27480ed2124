#!/usr/bin/env bash
# Installs the RPC peers that bench/rpc_vs_peers.py compares with (Debian 12), then builds them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh libzmq3-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev \
  protobuf-compiler libcapnp-dev capnproto
cmake --preset default >/dev/null
cmake --build --preset default --target rdmakit_tool rpc_call_cost rpc_floors zmq_rpc grpc_rpc capnp_rpc

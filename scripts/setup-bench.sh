#!/usr/bin/env bash
# Installs the peers the benchmark scripts compare with (Debian 12): the RPC peers of
# bench/rpc_vs_peers.py (then builds them) and Redis and memcached for bench/kv_vs_peers.py.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh libzmq3-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev \
  protobuf-compiler libcapnp-dev capnproto redis-server redis-tools memcached libmemcached-tools
cmake --preset default >/dev/null
cmake --build --preset default --target rdmakit_tool rpc_call_cost rpc_floors zmq_rpc grpc_rpc capnp_rpc

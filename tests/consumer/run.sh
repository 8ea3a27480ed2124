#!/usr/bin/env bash
# Builds the consumer programs against an installed rdmakit (CMake package, then pkg-config
# and make) and runs them on softrdma through the installed softrdma-run.
# Usage: tests/consumer/run.sh PREFIX      (PREFIX: where rdmakit is installed, e.g. /usr)
set -euo pipefail
prefix="$(cd "${1:?usage: run.sh PREFIX}" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
run="$prefix/bin/softrdma-run"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# first_write: a server and a client, each bounded in time.
check_first_write() {
  local program="$1" port
  port="$(free_port)"
  timeout 30 "$run" "$program" server "$port" > "$work/server.log" 2>&1 &
  local server=$!
  for _ in $(seq 100); do
    grep -q ":$(printf '%04X' "$port") .* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null && break
    sleep 0.05
  done
  timeout 30 "$run" "$program" client 127.0.0.1 "$port"
  wait "$server"
  grep -q 'received "hello over RDMA"' "$work/server.log" || {
    cat "$work/server.log"
    echo "$program: the server did not receive the write" >&2
    exit 1
  }
  echo "ok: $program"
}

check_rpc_echo() {
  timeout 30 "$run" "$1" both inproc://consumer | tee "$work/rpc.log"
  grep -q "calls answered, 0 failed" "$work/rpc.log" || { echo "$1: calls failed" >&2; exit 1; }
  echo "ok: $1"
}

echo "::: CMake: find_package(rdmakit) from $prefix"
cmake -S "$here" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
cmake --build "$work/cmake" > /dev/null
check_first_write "$work/cmake/first_write"
check_first_write "$work/cmake/first_write_static"
check_rpc_echo "$work/cmake/rpc_echo"

echo "::: pkg-config and make from $prefix"
mkdir -p "$work/make"
pc_dir="$(dirname "$(find "$prefix" -name rdmakit.pc -path '*pkgconfig*' | head -1)")"
PKG_CONFIG_PATH="$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" make -s -f "$here/Makefile" OUT="$work/make"
check_first_write "$work/make/first_write"
check_rpc_echo "$work/make/rpc_echo"

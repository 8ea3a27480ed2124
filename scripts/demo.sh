#!/usr/bin/env bash
# The main job: builds softrdma and runs unmodified RDMA programs on it, server and client
# on this host, printing what they did and measured.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh default >/dev/null
run=build/softrdma-run

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

pair() {  # pair TITLE PROGRAM ARGS...: server in the background, client against it
  local title=$1; shift
  local p; p=$(port)
  echo
  echo "=== $title: $* ==="
  "$run" timeout 60 "$@" -p "$p" > /tmp/rdmakit-demo-server.log 2>&1 &
  local server=$!
  for _ in $(seq 100); do ss -ltn | grep -q ":$p " && break; sleep 0.05; done
  "$run" timeout 60 "$@" -p "$p" 127.0.0.1
  wait "$server"
}

echo "=== the device ==="
"$run" ibv_devices
"$run" ibv_devinfo | grep -E "hca_id|state|active_mtu|link_layer"
"$run" ibv_devinfo -v | grep -E "GID\["

pair "RC ping-pong, 4 KiB messages, data checked" ibv_rc_pingpong -g 0 -c -s 4096 -n 10000
pair "RDMA WRITE bandwidth (perftest)" ib_write_bw -s 65536 -n 20000
pair "RDMA WRITE latency (perftest)" ib_write_lat -s 8 -n 20000
pair "RDMA READ latency (perftest)" ib_read_lat -s 8 -n 20000
pair "fetch-and-add latency (perftest)" ib_atomic_lat -n 20000

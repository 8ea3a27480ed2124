#!/usr/bin/env bash
# The main job: builds softrdma and runs RDMA programs on it, server and client on this
# host — our client/server example over the RDMA connection manager (raw verbs, then the
# same workflow with rdmakit), rdmakit's one-sided key-value lookup, then Debian's
# unmodified perftest beside `rdmakit perf`, then rdmakit rpc over each of its transports —
# printing what they did and measured.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh default >/dev/null
run=build/softrdma-run

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do ss -ltn | grep -q ":$1 " && return 0; sleep 0.05; done; return 1; }

echo "=== the device ==="
"$run" ibv_devices
"$run" ibv_devinfo | grep -E "hca_id|state|active_mtu|link_layer"
"$run" ibv_devinfo -v | grep -E "GID\["

echo
echo "=== examples/rdma_client_server: connect (RDMA CM), then timed RDMA WRITE and READ ==="
p=$(port)
"$run" build/examples/rdma_client_server --server --port "$p" &
server=$!
wait_port "$p"
"$run" build/examples/rdma_client_server --client 127.0.0.1 --port "$p" --size 65536 --iters 20000
wait "$server"
p=$(port)
"$run" build/examples/rdma_client_server --server --port "$p" >/dev/null &
server=$!
wait_port "$p"
"$run" build/examples/rdma_client_server --client 127.0.0.1 --port "$p" --size 8 --iters 20000
wait "$server"

example() {  # example TITLE PROGRAM SERVER-ARGS -- CLIENT-ARGS ({port} is a free port)
  local title=$1 program=$2; shift 2
  local server_args=() client_args=() p; p=$(port)
  while [ "$1" != "--" ]; do server_args+=("${1//\{port\}/$p}"); shift; done; shift
  for a in "$@"; do client_args+=("${a//\{port\}/$p}"); done
  echo
  echo "=== $title ==="
  "$run" timeout 60 "$program" "${server_args[@]}" &
  local server=$!
  wait_port "$p"
  "$run" timeout 60 "$program" "${client_args[@]}"
  wait "$server"
}

example "examples/rdmakit_client_server: the same workflow with rdmakit (coroutines)" \
  build/examples/rdmakit_client_server server --port {port} --cm -- \
  client 127.0.0.1 --port {port} --cm --size 65536 --iterations 20000
example "examples/kv_lookup: key-value lookups by one-sided RDMA READ (the server's CPU idles)" \
  build/examples/kv_lookup server --port {port} -- client 127.0.0.1 --port {port} --lookups 100000

pair() {  # pair TITLE PROGRAM ARGS...: perftest server in the background, client against it
  local title=$1; shift
  local p; p=$(port)
  echo
  echo "=== $title: $* ==="
  "$run" timeout 60 "$@" -p "$p" > /tmp/rdmakit-demo-server.log 2>&1 &
  local server=$!
  wait_port "$p"
  "$run" timeout 60 "$@" -p "$p" 127.0.0.1 | grep -E "^ *#bytes|^ *[0-9]"
  wait "$server"
}

pair "RDMA WRITE bandwidth (perftest)" ib_write_bw -s 65536 -n 20000
pair "RDMA WRITE latency (perftest)" ib_write_lat -s 8 -n 20000
pair "RDMA READ latency over RDMA CM (perftest -R)" ib_read_lat -s 8 -n 20000 -R
pair "RDMA WRITE bandwidth (rdmakit perf, poll mode)" build/tools/rdmakit perf write_bw -s 65536 -n 20000
pair "RDMA WRITE latency (rdmakit perf, coroutines)" build/tools/rdmakit perf write_lat -s 8 -n 20000 --mode coroutine

echo
echo "=== rdmakit rpc: examples/rpc_echo (two methods, a deferred reply, callbacks and a coroutine) ==="
timeout 60 build/examples/rpc_echo both inproc://demo --calls 1000
rpc_url="shm://rdmakit-demo-$$"
timeout 60 build/examples/rpc_echo server "$rpc_url" --sessions 1 &
server=$!
for _ in $(seq 100); do
  timeout 60 build/examples/rpc_echo client "$rpc_url" --calls 1000 2>/dev/null && break
  sleep 0.05
done
wait "$server"

rpc() {  # rpc TITLE URL ARGS...: rdmakit rpc-bench with its server on a thread of its own
  local title=$1 url=$2; shift 2
  echo
  echo "=== RPC $title over $url ==="
  timeout 60 build/softrdma-run build/tools/rdmakit rpc-bench "$url" --local "$@" |
    grep -E "^ *#bytes|^ *[0-9]"
}
# rc:// and ud:// run on softrdma's device (any RDMA NIC would do).
for url in inproc://demo "shm://rdmakit-demo-$$" tcp://127.0.0.1:0 rc://127.0.0.1:0 ud://127.0.0.1:0; do
  rpc "round trip, one call in flight" "$url" -t latency -D 1
  rpc "rate, 32 calls in flight" "$url" -t rate -q 32 -D 1
done
rpc "bandwidth, 1 MiB requests" "shm://rdmakit-demo-$$" -t bandwidth -q 4 -D 1
rpc "bandwidth, 1 MiB requests pulled by RDMA READ" rc://127.0.0.1:0 -t bandwidth -q 4 -D 1

echo
echo "=== rdmakit kv: GET/PUT/DELETE over rc://, 95 % GETs, every value checked ==="
timeout 60 build/softrdma-run build/tools/rdmakit kv rc://127.0.0.1:0 --local --keys 10000 -q 16 -D 1 |
  grep -E "keys|^ *#ops|^ *[0-9]"

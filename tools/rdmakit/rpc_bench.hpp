// `rdmakit rpc-bench`: request/response RPC benchmarks over any rdmakit rpc transport URL.
//   rdmakit rpc-bench URL --serve                     serve until interrupted (or -D)
//   rdmakit rpc-bench URL [--local] -t latency|rate|bandwidth ...   measure against it
// latency: one call in flight, percentiles of the round trip; rate: clients x depth calls in
// flight, calls per second; bandwidth: large requests (1 MiB) with small replies.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "rdmakit/rpc/options.hpp"

namespace rdmakit::tool {

enum class RpcTest { latency, rate, bandwidth };

struct RpcBenchOptions {
  std::string url;
  bool serve = false;  // only serve
  bool local = false;  // start the server(s) in this process
  RpcTest test = RpcTest::latency;
  uint64_t size = 0;           // request payload; 0: the test's default
  int64_t response_size = -1;  // -1: the test's default
  uint32_t clients = 1;        // sessions per client thread
  uint32_t depth = 1;          // calls in flight per session
  uint32_t threads = 1;        // client threads (and server threads with --local / --serve)
  double duration = 2.0;       // seconds measured (after a 10 % warm-up)
  uint64_t iterations = 0;     // latency: stop after this many calls instead
  rpc::Mode mode = rpc::Mode::busy_poll;
  uint32_t ring_bytes = 0;  // 0: the library's default
  bool json = false;
};

void add_rpc_bench_options(CLI::App& app, RpcBenchOptions& options);
void run_rpc_bench(RpcBenchOptions& options);

}  // namespace rdmakit::tool

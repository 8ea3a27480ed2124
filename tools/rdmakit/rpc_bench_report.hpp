// What `rdmakit rpc-bench` prints: a settings block and one row (perftest's layout), or one
// JSON object (--json).
#pragma once

#include <string>

#include "perf_stats.hpp"
#include "rpc_bench.hpp"

namespace rdmakit::tool {

struct RpcResult {
  std::string url;
  uint64_t request_bytes = 0;
  uint64_t response_bytes = 0;
  uint64_t calls = 0;  // completed while measuring, all threads
  double seconds = 0;
  uint64_t errors = 0;
  std::string first_error;
  LatFigures latency;            // usec
  uint64_t memory_per_peer = 0;  // bytes the client's transport allocated per session (0: unknown)
};

struct RpcReport {
  static void serving(const RpcBenchOptions& o, const std::string& url);
  static void print(const RpcBenchOptions& o, const RpcResult& r);
};

}  // namespace rdmakit::tool

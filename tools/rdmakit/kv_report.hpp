// What `rdmakit kv` prints: a settings block and one row, or one JSON object (--json).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kv_client.hpp"
#include "kv_options.hpp"

namespace rdmakit::tool::kv {

struct RunResult {
  std::string url;
  uint64_t ops = 0;  // completed while measuring, all threads
  double seconds = 0;
  uint64_t preloaded = 0, gets = 0, puts = 0, deletes = 0, found = 0, not_found = 0;
  uint64_t wrong = 0, failed = 0, probes = 0, torn_reads = 0;
  std::string first_error;
  LatFigures latency;  // usec

  uint64_t errors() const noexcept { return wrong + failed; }
  static RunResult merge(const std::string& url, std::span<ClientStats> threads);
};

void print_serving(const KvOptions& o, const std::string& url, uint16_t rdma_port);
void print_result(const KvOptions& o, const RunResult& r);

}  // namespace rdmakit::tool::kv

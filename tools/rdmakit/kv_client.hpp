// The clients of `rdmakit kv`: each thread owns one rpc endpoint (and with --one-sided one RDMA
// connection to the server's table) and keeps `depth` operations in flight, one coroutine
// each. A run first PUTs every key (the threads split them), then, once all threads are
// done, runs the workload for the duration, checking every GET's answer (kv_check).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "kv_check.hpp"
#include "kv_options.hpp"
#include "kv_protocol.hpp"
#include "kv_workload.hpp"
#include "perf_stats.hpp"

namespace rdmakit::tool::kv {

// What one client thread measured and found.
struct ClientStats {
  Measurement measurement;  // operations completed while measuring, and their latencies
  uint64_t preloaded = 0;   // PUTs of the preload (not in `puts`)
  uint64_t gets = 0, puts = 0, deletes = 0, found = 0, not_found = 0;
  uint64_t wrong = 0;       // GET answers that failed the check
  uint64_t failed = 0;      // operations that failed (error status, transport)
  uint64_t probes = 0;      // one-sided: slot copies read
  uint64_t torn_reads = 0;  // one-sided: copies overlapped by a write, read again
  std::string first_error;
};

// What the threads of one run share.
struct ClientPlan {
  const KvOptions* options = nullptr;
  std::string url;        // the server's
  std::string rdma_host;  // --one-sided
  TableInfo info;
  const KeyChooser* keys = nullptr;
  Writers* writers = nullptr;
  std::atomic<uint32_t> preloaded{0};
  std::atomic<bool> abort{false};  // a thread failed: everyone stops
};

// Asks the server at `url` for its table (and a grant of it for `grant_seconds`, if not 0)
// and reserves `writers` writer ids. Throws.
TableInfo describe(const std::string& url, uint32_t grant_seconds, uint32_t writers);

// Runs client thread `index` of the plan on the calling thread. Throws when it cannot set up;
// failures of operations are counted in `stats`.
void run_client(ClientPlan& plan, uint32_t index, ClientStats& stats);

}  // namespace rdmakit::tool::kv

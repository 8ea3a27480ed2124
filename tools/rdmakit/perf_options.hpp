// The settings of `rdmakit perf`: the test kinds and the perftest-like flags.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace rdmakit::tool {

enum class TestKind {
  write_bw,
  write_lat,
  read_bw,
  read_lat,
  send_bw,
  send_lat,
  atomic_bw,
  atomic_lat
};
// The operation a test measures.
enum class Verb { write, read, send, atomic };
// How the QPs are driven: PollQueuePair batches or coroutines on AsyncQueuePair.
enum class Mode { poll, coroutine };

struct TestInfo {
  const char* name;   // "write_bw"
  const char* title;  // "RDMA WRITE bandwidth"
  Verb verb;
  bool bandwidth;  // false: a latency test
};
const TestInfo& info(TestKind kind);
const char* to_string(Mode mode);

struct PerfOptions {
  TestKind test = TestKind::write_bw;
  std::string host;   // empty: this side is the server
  uint64_t size = 0;  // 0 until finish_perf_options applies the test's default
  bool all = false;
  uint32_t iters = 0;
  uint32_t tx_depth = 0;
  uint32_t qps = 1;
  uint32_t threads = 1;
  uint16_t port = 18515;
  bool rdma_cm = false;
  std::string device;
  uint32_t ib_port = 0;  // 0: the first active port
  int gid_index = -1;    // -1: the library's choice
  Mode mode = Mode::poll;
  bool json = false;
  std::string output;  // a file that receives the JSON lines
  uint32_t timeout_seconds = 60;

  bool server() const { return host.empty(); }
  std::chrono::seconds timeout() const { return std::chrono::seconds(timeout_seconds); }
  const TestInfo& test_info() const { return info(test); }
  // The message sizes to run, smallest first.
  std::vector<uint64_t> sizes() const;
};

// Registers the arguments and flags of `perf` on its subcommand.
void add_perf_options(CLI::App& perf, PerfOptions& options);
// Fills in the defaults that depend on the test kind and refuses combinations that cannot
// run; throws CLI::ValidationError.
void finish_perf_options(PerfOptions& options);

}  // namespace rdmakit::tool

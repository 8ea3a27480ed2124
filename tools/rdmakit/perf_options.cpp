#include "perf_options.hpp"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace rdmakit::tool {
namespace {

// perftest's defaults: bandwidth tests keep a deep queue of large messages, latency tests
// keep one small message in flight.
constexpr uint64_t kBwSize = 65536, kLatSize = 2, kAtomicSize = 8;
constexpr uint32_t kBwIters = 5000, kLatIters = 1000;
constexpr uint32_t kBwTxDepth = 128;
constexpr int kLargestSizeLog2 = 23;  // -a: 2 B .. 8 MiB

constexpr TestKind kTests[] = {TestKind::write_bw,  TestKind::write_lat, TestKind::read_bw,
                               TestKind::read_lat,  TestKind::send_bw,   TestKind::send_lat,
                               TestKind::atomic_bw, TestKind::atomic_lat};

}  // namespace

const TestInfo& info(TestKind kind) {
  static const TestInfo kInfo[] = {
      {"write_bw", "RDMA WRITE bandwidth", Verb::write, true},
      {"write_lat", "RDMA WRITE latency", Verb::write, false},
      {"read_bw", "RDMA READ bandwidth", Verb::read, true},
      {"read_lat", "RDMA READ latency", Verb::read, false},
      {"send_bw", "SEND bandwidth", Verb::send, true},
      {"send_lat", "SEND latency", Verb::send, false},
      {"atomic_bw", "fetch-and-add bandwidth", Verb::atomic, true},
      {"atomic_lat", "fetch-and-add latency", Verb::atomic, false},
  };
  return kInfo[static_cast<int>(kind)];
}

const char* to_string(Mode mode) {
  return mode == Mode::poll ? "poll" : "coroutine";
}

std::vector<uint64_t> PerfOptions::sizes() const {
  if (!all) return {size};
  std::vector<uint64_t> out;
  for (int i = 1; i <= kLargestSizeLog2; ++i) out.push_back(uint64_t{1} << i);
  return out;
}

void add_perf_options(CLI::App& perf, PerfOptions& o) {
  std::vector<std::string> names;
  for (TestKind kind : kTests) names.push_back(info(kind).name);
  perf.add_option_function<std::string>(
          "test",
          [&o](const std::string& name) {
            for (TestKind kind : kTests)
              if (name == info(kind).name) o.test = kind;
          },
          "the test: perftest's name without ib_")
      ->required()
      ->check(CLI::IsMember(names));
  perf.add_option("server-host", o.host, "the server to connect to; none: be the server");
  auto* size = perf.add_option("-s,--size", o.size,
                               "message size in bytes (default 65536 for bw, 2 for lat)");
  size->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  perf.add_flag("-a,--all", o.all, "run every size from 2 B to 8 MiB (powers of two)")
      ->excludes(size);
  perf.add_option("-n,--iters", o.iters, "operations per QP and size (default 5000 bw, 1000 lat)")
      ->check(CLI::PositiveNumber);
  perf.add_option("-t,--tx-depth", o.tx_depth,
                  "operations in flight per QP (default 128 bw, 1 lat)")
      ->check(CLI::Range(1u, 8192u));
  perf.add_option("-q,--qp", o.qps, "number of QPs (default 1)")->check(CLI::Range(1u, 1024u));
  perf.add_option("--threads", o.threads,
                  "client threads the QPs are spread over, each with its own CQ (default 1; "
                  "the server serves every QP from one thread)")
      ->check(CLI::Range(1u, 256u));
  perf.add_option("-p,--port", o.port, "TCP or RDMA CM port (default 18515)");
  perf.add_flag("-R,--rdma_cm", o.rdma_cm, "connect with RDMA CM instead of the TCP exchange");
  perf.add_option("-d,--ib-dev", o.device,
                  "device to use (default: the first with an active port)");
  perf.add_option("-i,--ib-port", o.ib_port, "port of the device (default: the first active)")
      ->check(CLI::Range(0u, 255u));
  perf.add_option("-x,--gid-index", o.gid_index, "GID index (default: the library's choice)")
      ->check(CLI::NonNegativeNumber);
  perf.add_option_function<std::string>(
          "--mode",
          [&o](const std::string& mode) { o.mode = mode == "poll" ? Mode::poll : Mode::coroutine; },
          "poll: PollQueuePair batches and CQ polling; coroutine: AsyncQueuePair and a Poller, "
          "tx-depth coroutines per QP (default poll)")
      ->check(CLI::IsMember({"poll", "coroutine"}));
  perf.add_flag("--json", o.json, "print one JSON object per size instead of the table");
  perf.add_option("--output", o.output, "also write the JSON objects to this file");
  perf.add_option("--timeout", o.timeout_seconds,
                  "seconds any wait may last (a client, a message, a completion; default 60)")
      ->check(CLI::PositiveNumber);
}

void finish_perf_options(PerfOptions& o) {
  const TestInfo& test = o.test_info();
  if (test.verb == Verb::atomic) {
    if (o.all || (o.size != 0 && o.size != kAtomicSize))
      throw CLI::ValidationError("--size", "atomic tests always move 8 bytes");
    o.size = kAtomicSize;
  }
  if (o.size == 0) o.size = test.bandwidth ? kBwSize : kLatSize;
  if (o.iters == 0) o.iters = test.bandwidth ? kBwIters : kLatIters;
  if (o.tx_depth == 0) o.tx_depth = test.bandwidth ? kBwTxDepth : 1;
  if (!test.bandwidth && o.tx_depth != 1)
    throw CLI::ValidationError("--tx-depth", "latency tests keep one operation in flight per QP");
  if (o.threads > o.qps)
    throw CLI::ValidationError("--threads", "more threads than QPs (--qp) would leave some idle");
}

}  // namespace rdmakit::tool

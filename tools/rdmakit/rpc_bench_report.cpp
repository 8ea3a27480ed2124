#include "rpc_bench_report.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace rdmakit::tool {
namespace {

const char* test_name(RpcTest t) {
  switch (t) {
    case RpcTest::latency:
      return "latency";
    case RpcTest::rate:
      return "rate";
    case RpcTest::bandwidth:
      return "bandwidth";
  }
  return "?";
}
const char* mode_name(rpc::Mode m) {
  return m == rpc::Mode::busy_poll ? "busy_poll" : "blocking";
}
constexpr const char* kRule =
    "---------------------------------------------------------------------------------------";

}  // namespace

void RpcReport::serving(const RpcBenchOptions& o, const std::string& url) {
  std::printf("%s\n rdmakit rpc-bench server on %s (%u thread%s, %s)\n%s\n", kRule, url.c_str(),
              o.threads, o.threads == 1 ? "" : "s", mode_name(o.mode), kRule);
  std::fflush(stdout);
}

void RpcReport::print(const RpcBenchOptions& o, const RpcResult& r) {
  const double rate = r.seconds > 0 ? static_cast<double>(r.calls) / r.seconds : 0;
  const double mb = rate * static_cast<double>(r.request_bytes + r.response_bytes) / 1e6;
  if (o.json) {
    nlohmann::json j = {
        {"test", test_name(o.test)},
        {"url", r.url},
        {"request_bytes", r.request_bytes},
        {"response_bytes", r.response_bytes},
        {"threads", o.threads},
        {"clients", o.clients},
        {"depth", o.depth},
        {"mode", mode_name(o.mode)},
        {"calls", r.calls},
        {"seconds", r.seconds},
        {"calls_per_second", rate},
        {"mb_per_second", mb},
        {"errors", r.errors},
        {"memory_per_peer_bytes", r.memory_per_peer},
        {"latency_us",
         {{"min", r.latency.min},
          {"median", r.latency.typical},
          {"avg", r.latency.avg},
          {"p99", r.latency.p99},
          {"p99_9", r.latency.p999},
          {"max", r.latency.max}}},
    };
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s\n", kRule);
    std::printf(" RPC %s over %s\n", test_name(o.test), r.url.c_str());
    std::printf(" request %llu B, response %llu B, %u thread%s x %u client%s x depth %u, %s\n",
                static_cast<unsigned long long>(r.request_bytes),
                static_cast<unsigned long long>(r.response_bytes), o.threads,
                o.threads == 1 ? "" : "s", o.clients, o.clients == 1 ? "" : "s", o.depth,
                mode_name(o.mode));
    std::printf("%s\n", kRule);
    if (o.test == RpcTest::latency) {
      std::printf(" %-8s %-10s %-10s %-12s %-10s %-12s %-10s %-10s\n", "#bytes", "#calls",
                  "t_min[us]", "t_median[us]", "t_p99[us]", "t_p99.9[us]", "t_max[us]",
                  "t_avg[us]");
      std::printf(" %-8llu %-10llu %-10.2f %-12.2f %-10.2f %-12.2f %-10.2f %-10.2f\n",
                  static_cast<unsigned long long>(r.request_bytes),
                  static_cast<unsigned long long>(r.calls), r.latency.min, r.latency.typical,
                  r.latency.p99, r.latency.p999, r.latency.max, r.latency.avg);
    } else {
      std::printf(" %-8s %-11s %-9s %-11s %-11s %-12s %-10s\n", "#bytes", "#calls", "seconds",
                  "Mcalls/s", "MB/s", "t_median[us]", "t_p99[us]");
      std::printf(" %-8llu %-11llu %-9.2f %-11.3f %-11.1f %-12.2f %-10.2f\n",
                  static_cast<unsigned long long>(r.request_bytes),
                  static_cast<unsigned long long>(r.calls), r.seconds, rate / 1e6, mb,
                  r.latency.typical, r.latency.p99);
    }
    if (r.memory_per_peer != 0)
      std::printf(" memory per peer (client side): %.1f KiB\n",
                  static_cast<double>(r.memory_per_peer) / 1024);
    std::printf("%s\n", kRule);
  }
  if (r.errors != 0) {
    std::fprintf(stderr, "rpc-bench: %llu calls failed (first: %s)\n",
                 static_cast<unsigned long long>(r.errors), r.first_error.c_str());
  }
}

}  // namespace rdmakit::tool

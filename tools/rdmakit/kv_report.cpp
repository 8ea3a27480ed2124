#include "kv_report.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace rdmakit::tool::kv {
namespace {

constexpr const char* kRule =
    "---------------------------------------------------------------------------------------";

const char* distribution_name(Distribution d) {
  return d == Distribution::zipf ? "zipf" : "uniform";
}

}  // namespace

RunResult RunResult::merge(const std::string& url, std::span<ClientStats> threads) {
  RunResult r;
  r.url = url;
  std::vector<Measurement> measurements;
  for (ClientStats& t : threads) {
    r.ops += t.measurement.ops;
    r.seconds = std::max(
        r.seconds, std::chrono::duration<double>(t.measurement.end - t.measurement.start).count());
    r.preloaded += t.preloaded;
    r.gets += t.gets;
    r.puts += t.puts;
    r.deletes += t.deletes;
    r.found += t.found;
    r.not_found += t.not_found;
    r.wrong += t.wrong;
    r.failed += t.failed;
    r.probes += t.probes;
    r.torn_reads += t.torn_reads;
    if (r.first_error.empty()) r.first_error = t.first_error;
    measurements.push_back(std::move(t.measurement));
  }
  r.latency = tool::latency(measurements);
  return r;
}

void print_serving(const KvOptions& o, const std::string& url, uint16_t rdma_port) {
  std::printf("%s\n rdmakit kv server on %s: %llu keys, values up to %u B, RDMA on port %u\n%s\n",
              kRule, url.c_str(), static_cast<unsigned long long>(o.keys), o.value_size, rdma_port,
              kRule);
  std::fflush(stdout);
}

void print_result(const KvOptions& o, const RunResult& r) {
  const double rate = r.seconds > 0 ? static_cast<double>(r.ops) / r.seconds : 0;
  if (o.json) {
    const nlohmann::json j = {
        {"url", r.url},
        {"keys", o.keys},
        {"value_size", o.value_size},
        {"distribution", distribution_name(o.distribution)},
        {"read_ratio", o.read_ratio},
        {"delete_ratio", o.delete_ratio},
        {"clients", o.clients},
        {"depth", o.depth},
        {"one_sided", o.one_sided},
        {"ops", r.ops},
        {"seconds", r.seconds},
        {"ops_per_second", rate},
        {"preloaded", r.preloaded},
        {"gets", r.gets},
        {"puts", r.puts},
        {"deletes", r.deletes},
        {"found", r.found},
        {"not_found", r.not_found},
        {"checked", r.found + r.not_found},
        {"wrong_values", r.wrong},
        {"failed_ops", r.failed},
        {"errors", r.errors()},
        {"slot_reads", r.probes},
        {"torn_reads", r.torn_reads},
        {"latency_us",
         {{"min", r.latency.min},
          {"median", r.latency.typical},
          {"avg", r.latency.avg},
          {"p99", r.latency.p99},
          {"max", r.latency.max}}},
    };
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s\n", kRule);
    std::printf(" KV over %s%s\n", r.url.c_str(), o.one_sided ? ", GETs by RDMA READ" : "");
    std::printf(
        " %llu keys, %u B values, %s keys, %u%% GET (%u%% of writes DELETE), %u client%s x "
        "depth %u\n",
        static_cast<unsigned long long>(o.keys), o.value_size, distribution_name(o.distribution),
        o.read_ratio, o.delete_ratio, o.clients, o.clients == 1 ? "" : "s", o.depth);
    std::printf("%s\n", kRule);
    std::printf(" %-11s %-9s %-11s %-12s %-10s %-10s %-8s\n", "#ops", "seconds", "Mops/s",
                "t_median[us]", "t_p99[us]", "#checked", "#wrong");
    std::printf(" %-11llu %-9.2f %-11.3f %-12.2f %-10.2f %-10llu %-8llu\n",
                static_cast<unsigned long long>(r.ops), r.seconds, rate / 1e6, r.latency.typical,
                r.latency.p99, static_cast<unsigned long long>(r.found + r.not_found),
                static_cast<unsigned long long>(r.wrong));
    if (o.one_sided)
      std::printf(" one-sided: %llu slot reads, %llu torn and read again\n",
                  static_cast<unsigned long long>(r.probes),
                  static_cast<unsigned long long>(r.torn_reads));
    std::printf("%s\n", kRule);
  }
  std::fflush(stdout);
  if (r.errors() != 0) {
    std::fprintf(stderr, "rdmakit kv: %llu wrong values, %llu failed operations (first: %s)\n",
                 static_cast<unsigned long long>(r.wrong),
                 static_cast<unsigned long long>(r.failed), r.first_error.c_str());
  }
}

}  // namespace rdmakit::tool::kv

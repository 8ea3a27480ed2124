#include "perf_report.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bounded.hpp"

namespace rdmakit::tool {
namespace {

constexpr const char* kRule =
    "---------------------------------------------------------------------------------------";
// Connections listed in the header; more are only counted.
constexpr size_t kListedConnections = 8;

struct Column {
  const char* title;
  int width;  // title and values are padded to it
};
const std::vector<Column> kBwColumns = {{"#bytes", 10},
                                        {"#iterations", 14},
                                        {"BW peak[MiB/sec]", 19},
                                        {"BW average[MiB/sec]", 21},
                                        {"MsgRate[Mpps]", 0}};
const std::vector<Column> kLatColumns = {
    {"#bytes", 6},         {"#iterations", 14},          {"t_min[usec]", 14},
    {"t_max[usec]", 14},   {"t_typical[usec]", 16},      {"t_avg[usec]", 14},
    {"t_stdev[usec]", 16}, {"99% percentile[usec]", 22}, {"99.9% percentile[usec]", 0}};

void print_line(const std::vector<Column>& columns, const std::vector<std::string>& cells) {
  std::string line;
  for (size_t i = 0; i < columns.size(); ++i) {
    line += ' ';
    line += cells[i];
    if (cells[i].size() < static_cast<size_t>(columns[i].width))
      line.append(static_cast<size_t>(columns[i].width) - cells[i].size(), ' ');
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  std::printf("%s\n", line.c_str());
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

const char* link_layer(uint8_t layer) {
  return layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
}

int mtu_bytes(ibv_mtu mtu) {
  return 128 << static_cast<int>(mtu);
}

nlohmann::json to_json(const PerfOptions& o, const SizeResult& r) {
  const TestInfo& test = o.test_info();
  nlohmann::json j = {
      {"test", test.name},
      {"role", o.server() ? "server" : "client"},
      {"size", r.size},
      {"iterations", r.iterations},
      {"qps", o.qps},
      {"threads", o.server() ? 1 : o.threads},
      {"mode", to_string(o.mode)},
      {"rdma_cm", o.rdma_cm},
  };
  if (test.bandwidth) {
    j["tx_depth"] = o.tx_depth;
    j["bw_peak_mib"] = r.bw.peak_mib;
    j["bw_avg_mib"] = r.bw.avg_mib;
    j["msg_rate_mpps"] = r.bw.msg_rate_mpps;
  } else {
    j["t_min"] = r.lat.min;
    j["t_max"] = r.lat.max;
    j["t_typical"] = r.lat.typical;
    j["t_avg"] = r.lat.avg;
    j["t_stdev"] = r.lat.stdev;
    j["t_99"] = r.lat.p99;
    j["t_99.9"] = r.lat.p999;
  }
  return j;
}

}  // namespace

Report::Report(const PerfOptions& options) : o_(options) {
  if (o_.output.empty()) return;
  file_.open(o_.output, std::ios::out | std::ios::trunc);
  if (!file_) throw PerfError("cannot write " + o_.output);
}

void Report::waiting_for_client() const {
  if (!table()) return;
  std::printf(" Waiting for a client on port %u (%s)...\n", o_.port,
              o_.rdma_cm ? "RDMA CM" : "TCP exchange");
  std::fflush(stdout);
}

void Report::header(std::span<const Worker> workers) const {
  if (!table()) return;
  const Resources& res = *workers.front().resources;
  const Connection& first = workers.front().peers.front().connection;
  const TestInfo& test = o_.test_info();
  const std::string title = std::string(test.title) + " test";
  std::printf("%s\n%*s%s\n", kRule, static_cast<int>((std::strlen(kRule) - title.size()) / 2), "",
              title.c_str());
  std::printf(" %-16s: %-22s %-16s: %s\n", "Device",
              (res.context.name() + " port " + std::to_string(res.context.port())).c_str(),
              "Connection", o_.rdma_cm ? "RC, RDMA CM" : "RC, TCP exchange");
  std::printf(" %-16s: %-22u %-16s: %u\n", "Number of QPs", o_.qps, "Threads",
              o_.server() ? 1u : o_.threads);
  std::printf(" %-16s: %-22u %-16s: %s\n", "TX depth", o_.tx_depth, "Mode", to_string(o_.mode));
  std::printf(" %-16s: %-22s %-16s: %u[B]\n", "MTU",
              (std::to_string(mtu_bytes(first.negotiated().path.mtu)) + "[B]").c_str(),
              "Max inline data", first.negotiated().inline_size);
  std::printf(" %-16s: %-22s %-16s: %u\n", "Link type",
              link_layer(res.context.port_info().link_layer), "Iterations", o_.iters);
  std::printf(" %-16s: %s\n", "GID", res.context.gid().summary.c_str());
  std::printf("%s\n", kRule);
  size_t listed = 0, total = 0;
  for (const Worker& w : workers) {
    for (const Peer& p : w.peers) {
      ++total;
      if (listed == kListedConnections) continue;
      ++listed;
      std::printf(" QP %-4u: %s\n", p.index, p.connection.summary().c_str());
    }
  }
  if (total > listed) std::printf(" ... and %zu more QPs\n", total - listed);
  std::printf("%s\n", kRule);
  const auto& columns = test.bandwidth ? kBwColumns : kLatColumns;
  std::vector<std::string> titles;
  for (const Column& c : columns) titles.push_back(c.title);
  print_line(columns, titles);
  std::fflush(stdout);
}

void Report::row(const SizeResult& r) {
  if (file_.is_open()) file_ << to_json(o_, r).dump() << '\n' << std::flush;
  if (!table()) {
    std::printf("%s\n", to_json(o_, r).dump().c_str());
  } else if (o_.test_info().bandwidth) {
    print_line(kBwColumns,
               {std::to_string(r.size), std::to_string(r.iterations), fixed(r.bw.peak_mib, 2),
                fixed(r.bw.avg_mib, 2), fixed(r.bw.msg_rate_mpps, 6)});
  } else {
    print_line(kLatColumns,
               {std::to_string(r.size), std::to_string(r.iterations), fixed(r.lat.min, 2),
                fixed(r.lat.max, 2), fixed(r.lat.typical, 2), fixed(r.lat.avg, 2),
                fixed(r.lat.stdev, 2), fixed(r.lat.p99, 2), fixed(r.lat.p999, 2)});
  }
  std::fflush(stdout);
}

void Report::footer() const {
  if (table()) std::printf("%s\n", kRule);
  std::fflush(stdout);
}

}  // namespace rdmakit::tool

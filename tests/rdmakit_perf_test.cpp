// `rdmakit perf` and `rdmakit devices` (tools/rdmakit) on softrdma: server and client on this
// host for every test kind, both connection back ends, several QPs on several threads, the
// coroutine engine, JSON output, and the failures a user meets first.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/listening.hpp"
#include "support/subprocess.hpp"

namespace {

using namespace std::chrono_literals;
using rdmakit::testing::Exit;
using ::testing::HasSubstr;

std::vector<std::string> tool(const std::string& args) {
  std::vector<std::string> argv{SOFTRDMA_RUN, RDMAKIT_TOOL};
  for (const std::string& w : rdmakit::testing::words(args)) argv.push_back(w);
  return argv;
}

struct Pair {
  Exit server, client;
};

// `rdmakit perf <args>` as a server, then as its client; `client_args` are the client's own.
Pair run_perf(const std::string& args, const std::string& client_args = "") {
  const std::string port = std::to_string(rdmakit::testing::free_tcp_port());
  rdmakit::testing::Process server(tool("perf " + args + " -p " + port));
  if (!rdmakit::testing::wait_listening(std::stoi(port), 10s)) {
    const Exit e = server.wait(1s);
    ADD_FAILURE() << "the server did not listen: " << e.describe() << "\n" << e.output;
    return {e, {}};
  }
  const std::string client = client_args.empty() ? args : client_args;
  Exit done = rdmakit::testing::run(tool("perf " + client + " -p " + port + " 127.0.0.1"), 120s);
  return {server.wait(30s), done};
}

// The rows of a report table: the lines between the column titles and the closing rule.
std::vector<std::vector<double>> table_rows(const std::string& output) {
  std::vector<std::vector<double>> rows;
  std::istringstream lines(output);
  bool in_table = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("#bytes") != std::string::npos) {
      in_table = true;
    } else if (in_table && line.rfind("---", 0) == 0) {
      in_table = false;
    } else if (in_table) {
      std::istringstream cells(line);
      std::vector<double> row;
      for (double v; cells >> v;) row.push_back(v);
      rows.push_back(row);
    }
  }
  return rows;
}

std::vector<nlohmann::json> json_lines(const std::string& output) {
  std::vector<nlohmann::json> objects;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    objects.push_back(nlohmann::json::parse(line));  // throws (fails the test) if not JSON
  }
  return objects;
}

std::vector<double> all_sizes() {
  std::vector<double> sizes;
  for (int i = 1; i <= 23; ++i) sizes.push_back(static_cast<double>(1 << i));
  return sizes;
}

struct TableCase {
  std::string name;
  std::string args;
  std::vector<double> sizes;  // expected in the first column
  double iterations;
};

std::ostream& operator<<(std::ostream& os, const TableCase& c) {
  return os << c.args;
}

class PerfTable : public ::testing::TestWithParam<TableCase> {};

TEST_P(PerfTable, BothSidesPrintARowOfPositiveFiguresPerSize) {
  const TableCase& c = GetParam();
  const Pair r = run_perf(c.args);
  ASSERT_TRUE(r.client.ok()) << "client: " << r.client.describe();
  ASSERT_TRUE(r.server.ok()) << "server: " << r.server.describe();
  const bool bandwidth = c.args.find("_bw") != std::string::npos;
  for (const Exit* side : {&r.client, &r.server}) {
    const auto rows = table_rows(side->output);
    ASSERT_EQ(rows.size(), c.sizes.size()) << side->output;
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::vector<double>& row = rows[i];
      // bw: bytes, iterations, peak, average, message rate; lat: bytes, iterations, min,
      // max, typical, average, stdev, 99%, 99.9%.
      ASSERT_EQ(row.size(), bandwidth ? 5u : 9u) << side->output;
      EXPECT_EQ(row[0], c.sizes[i]);
      EXPECT_EQ(row[1], c.iterations);
      for (size_t k = 2; k < row.size(); ++k) {
        if (!bandwidth && k == 6)
          EXPECT_GE(row[k], 0) << "stdev in\n" << side->output;
        else
          EXPECT_GT(row[k], 0) << "column " << k << " in\n" << side->output;
      }
    }
  }
}

std::vector<TableCase> table_cases() {
  std::vector<TableCase> cases;
  const std::pair<const char*, double> kinds[] = {
      {"write_bw", 65536}, {"read_bw", 65536}, {"send_bw", 65536}, {"atomic_bw", 8},
      {"write_lat", 2},    {"read_lat", 2},    {"send_lat", 2},    {"atomic_lat", 8}};
  for (const auto& [kind, size] : kinds) {
    const bool bw = std::string(kind).ends_with("_bw");
    const std::string iters = bw ? "300" : "200";
    for (const char* mode : {"poll", "coroutine"})
      cases.push_back({std::string(kind) + "_" + mode,
                       std::string(kind) + " -n " + iters + " --mode " + mode,
                       {size},
                       std::stod(iters)});
    cases.push_back({std::string(kind) + "_4qps_2threads",
                     std::string(kind) + " -n " + iters + " -q 4 --threads 2",
                     {size},
                     std::stod(iters)});
  }
  for (const char* kind : {"write_bw", "write_lat", "send_bw", "read_lat"}) {
    cases.push_back(
        {std::string(kind) + "_rdma_cm", std::string(kind) + " -R -s 4096 -n 200", {4096}, 200});
    cases.push_back({std::string(kind) + "_rdma_cm_coroutine",
                     std::string(kind) + " -R -s 4096 -n 200 --mode coroutine",
                     {4096},
                     200});
  }
  cases.push_back({"write_bw_rdma_cm_4qps_2threads_coroutine",
                   "write_bw -R -s 1024 -n 200 -q 4 --threads 2 --mode coroutine",
                   {1024},
                   200});
  cases.push_back({"send_lat_4qps_2threads_coroutine",
                   "send_lat -n 100 -q 4 --threads 2 --mode coroutine",
                   {2},
                   100});
  cases.push_back({"write_bw_all_sizes", "write_bw -a -n 20", all_sizes(), 20});
  cases.push_back(
      {"write_lat_all_sizes_coroutine", "write_lat -a -n 20 --mode coroutine", all_sizes(), 20});
  cases.push_back({"send_bw_all_sizes_rdma_cm", "send_bw -a -n 20 -R", all_sizes(), 20});
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<TableCase>& param) {
  return param.param.name;
}

INSTANTIATE_TEST_SUITE_P(Perf, PerfTable, ::testing::ValuesIn(table_cases()), case_name);

void expect_keys(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  for (const char* key : keys) EXPECT_TRUE(j.contains(key)) << key << " missing in " << j.dump();
}

TEST(PerfJson, BandwidthPrintsOneObjectWithTheFigures) {
  const Pair r = run_perf("write_bw -s 4096 -n 300 -q 2 --threads 2 --json");
  ASSERT_TRUE(r.client.ok()) << r.client.describe();
  ASSERT_TRUE(r.server.ok()) << r.server.describe();
  const auto objects = json_lines(r.client.output);
  ASSERT_EQ(objects.size(), 1u) << r.client.output;
  const nlohmann::json& j = objects[0];
  expect_keys(j, {"test", "size", "iterations", "qps", "threads", "mode", "bw_peak_mib",
                  "bw_avg_mib", "msg_rate_mpps"});
  EXPECT_EQ(j["test"], "write_bw");
  EXPECT_EQ(j["size"], 4096);
  EXPECT_EQ(j["iterations"], 300);
  EXPECT_EQ(j["qps"], 2);
  EXPECT_EQ(j["threads"], 2);
  EXPECT_EQ(j["mode"], "poll");
  EXPECT_GT(j["bw_avg_mib"].get<double>(), 0);
  EXPECT_GE(j["bw_peak_mib"].get<double>(), j["bw_avg_mib"].get<double>());
  EXPECT_GT(j["msg_rate_mpps"].get<double>(), 0);
  // The server shows the figures the client measured.
  EXPECT_EQ(json_lines(r.server.output).at(0)["bw_avg_mib"], j["bw_avg_mib"]);
}

TEST(PerfJson, LatencyPrintsOneObjectPerSize) {
  const Pair r = run_perf("send_lat -a -n 20 --mode coroutine --json");
  ASSERT_TRUE(r.client.ok()) << r.client.describe();
  ASSERT_TRUE(r.server.ok()) << r.server.describe();
  const auto objects = json_lines(r.client.output);
  ASSERT_EQ(objects.size(), 23u) << r.client.output;
  for (size_t i = 0; i < objects.size(); ++i) {
    const nlohmann::json& j = objects[i];
    expect_keys(j, {"test", "size", "iterations", "qps", "threads", "mode", "t_min", "t_max",
                    "t_typical", "t_avg", "t_stdev", "t_99", "t_99.9"});
    EXPECT_EQ(j["size"], uint64_t{2} << i);
    EXPECT_EQ(j["mode"], "coroutine");
    EXPECT_GT(j["t_min"].get<double>(), 0);
    EXPECT_LE(j["t_min"].get<double>(), j["t_typical"].get<double>());
    EXPECT_LE(j["t_typical"].get<double>(), j["t_max"].get<double>());
    EXPECT_LE(j["t_99"].get<double>(), j["t_99.9"].get<double>());
  }
}

TEST(PerfJson, OutputFileGetsTheObjectsBesideTheTable) {
  char path[] = "/tmp/rdmakit-perf-json-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  const Pair r = run_perf("read_lat -n 100", std::string("read_lat -n 100 --output ") + path);
  ASSERT_TRUE(r.client.ok()) << r.client.describe();
  ASSERT_TRUE(r.server.ok()) << r.server.describe();
  EXPECT_EQ(table_rows(r.client.output).size(), 1u) << r.client.output;
  std::ifstream file(path);
  std::stringstream content;
  content << file.rdbuf();
  std::remove(path);
  const auto objects = json_lines(content.str());
  ASSERT_EQ(objects.size(), 1u) << content.str();
  EXPECT_EQ(objects[0]["test"], "read_lat");
  EXPECT_GT(objects[0]["t_avg"].get<double>(), 0);
}

TEST(PerfErrors, AServerRunningAnotherTestIsRefusedWithTheDifference) {
  const Pair r = run_perf("read_bw -n 100 --timeout 10", "write_bw -n 100");
  EXPECT_EQ(r.client.code, 1) << r.client.describe();
  EXPECT_THAT(r.client.output, HasSubstr("the server runs read_bw, this client write_bw"));
  EXPECT_FALSE(r.server.ok()) << r.server.describe();
  EXPECT_FALSE(r.server.timed_out) << r.server.describe();
}

TEST(PerfErrors, NoServerIsAPlainError) {
  const int port = rdmakit::testing::free_tcp_port();
  const Exit e =
      rdmakit::testing::run(tool("perf write_bw -p " + std::to_string(port) + " 127.0.0.1"), 30s);
  EXPECT_EQ(e.code, 1) << e.describe();
  EXPECT_THAT(e.output, HasSubstr("connecting QP 0 to 127.0.0.1"));
}

TEST(PerfErrors, AServerWithoutClientGivesUpAfterTheTimeout) {
  const int port = rdmakit::testing::free_tcp_port();
  const Exit e =
      rdmakit::testing::run(tool("perf write_bw --timeout 1 -p " + std::to_string(port)), 30s);
  EXPECT_EQ(e.code, 1) << e.describe();
  EXPECT_THAT(e.output, HasSubstr("waiting for the client's QP 0 of 1"));
}

TEST(Devices, ListsSoftrdmaWithItsGidsAndTheChosenOne) {
  const Exit e = rdmakit::testing::run(tool("devices"), 30s);
  ASSERT_TRUE(e.ok()) << e.describe();
  EXPECT_THAT(e.output, HasSubstr("softrdma0"));
  EXPECT_THAT(e.output, HasSubstr("GID 0"));
  EXPECT_THAT(e.output, HasSubstr("chosen: softrdma0 port 1 GID"));
}

TEST(Devices, JsonHasPortsGidsAndTheChoice) {
  const Exit e = rdmakit::testing::run(tool("devices --json"), 30s);
  ASSERT_TRUE(e.ok()) << e.describe();
  const nlohmann::json devices = nlohmann::json::parse(e.output);
  ASSERT_TRUE(devices.is_array());
  ASSERT_FALSE(devices.empty());
  const nlohmann::json& d = devices[0];
  EXPECT_EQ(d["name"], "softrdma0");
  ASSERT_FALSE(d["ports"].empty());
  const nlohmann::json& port = d["ports"][0];
  EXPECT_EQ(port["number"], 1);
  ASSERT_FALSE(port["gids"].empty());
  expect_keys(port["gids"][0], {"index", "gid", "address", "type"});
  EXPECT_THAT(port["chosen_gid"]["summary"].get<std::string>(), HasSubstr("softrdma0 port 1"));
}

// -v adds each port's hardware counters: softrdma0's, as softrdma-run's view shows them
// in sysfs, among them the requests it refused from hosts that were not a QP's peer.
TEST(Devices, VerboseShowsTheCountersOfRefusedTraffic) {
  const Exit e = rdmakit::testing::run(tool("devices -v"), 30s);
  ASSERT_TRUE(e.ok()) << e.describe();
  EXPECT_THAT(e.output, ::testing::ContainsRegex("counter foreign_requests +[0-9]+"));
  EXPECT_THAT(e.output, ::testing::ContainsRegex("counter resp_remote_access_errors +[0-9]+"));
  const Exit json = rdmakit::testing::run(tool("devices -v --json"), 30s);
  ASSERT_TRUE(json.ok()) << json.describe();
  const nlohmann::json counters = nlohmann::json::parse(json.output)[0]["ports"][0]["hw_counters"];
  EXPECT_TRUE(counters.contains("foreign_requests")) << counters.dump();
  EXPECT_TRUE(counters["out_of_sequence"].is_number_unsigned()) << counters.dump();
}

// A run of several sizes shows which one it is at on a terminal (here a pseudo-terminal made
// by script(1)), and nothing of it when its output goes to a file or a pipe.
TEST(PerfProgress, ShownOnATerminalOnly) {
  const std::string port = std::to_string(rdmakit::testing::free_tcp_port());
  rdmakit::testing::Process server(tool("perf write_lat -a -n 200 -p " + port));
  ASSERT_TRUE(rdmakit::testing::wait_listening(std::stoi(port), 10s));
  std::string client;
  for (const std::string& w : tool("perf write_lat -a -n 200 -p " + port + " 127.0.0.1"))
    client += w + " ";
  const Exit on_terminal = rdmakit::testing::run({"script", "-qfec", client, "/dev/null"}, 120s);
  ASSERT_TRUE(on_terminal.ok()) << on_terminal.describe();
  // -a: 23 sizes, 2 B to 8 MiB.
  EXPECT_THAT(on_terminal.output, HasSubstr("rdmakit perf write_lat: 1/23 2 B, "));
  EXPECT_THAT(on_terminal.output, HasSubstr("rdmakit perf write_lat: 23/23 8388608 B, "));
  EXPECT_TRUE(server.wait(30s).ok());

  const Pair piped = run_perf("write_lat -a -n 200");
  ASSERT_TRUE(piped.client.ok()) << piped.client.describe();
  EXPECT_THAT(piped.client.output, ::testing::Not(HasSubstr("rdmakit perf write_lat: ")));
  EXPECT_EQ(piped.client.output.find('\r'), std::string::npos);
}

// Without softrdma (and without a NIC) the tools say how to get a device, in one line.
TEST(Devices, WithoutADeviceTheToolsPointToSoftrdmaRun) {
  const std::vector<std::string> bare{"env", "-u", "LD_LIBRARY_PATH", RDMAKIT_TOOL};
  const Exit listed = rdmakit::testing::run(rdmakit::testing::with_args(bare, "devices"), 30s);
  ASSERT_TRUE(listed.ok()) << listed.describe();
  if (listed.output.find("no RDMA device found") == std::string::npos)
    GTEST_SKIP() << "this machine has an RDMA device of its own:\n" << listed.output;
  EXPECT_THAT(listed.output, HasSubstr("run it under softrdma-run to use the software device"));
  const Exit perf =
      rdmakit::testing::run(rdmakit::testing::with_args(bare, "perf write_bw -p 1 127.0.0.1"), 30s);
  EXPECT_FALSE(perf.ok());
  EXPECT_THAT(
      perf.output,
      HasSubstr("no RDMA device found; run it under softrdma-run to use the software device"));
}

}  // namespace

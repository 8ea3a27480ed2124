// `rdmakit rpc-bench` (tools/rdmakit) on every transport: the server and the client as
// separate processes (inproc: both in one), latency, rate and bandwidth, busy-polling and
// blocking, JSON out; TCP, RDMA RC and UD (on softrdma) also between two network namespaces,
// UD also over a lossy, slow link.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "support/json_lines.hpp"
#include "support/listening.hpp"
#include "support/subprocess.hpp"
#include "support/two_hosts.hpp"

namespace {

using namespace std::chrono_literals;
using rdmakit::testing::Exit;

using rdmakit::testing::last_json;

std::vector<std::string> tool(const std::string& args, std::vector<std::string> prefix = {}) {
  prefix.push_back(RDMAKIT_TOOL);
  prefix.push_back("rpc-bench");
  return rdmakit::testing::with_args(std::move(prefix), args);
}

// Runs the client with `args`, checks its JSON and returns it.
nlohmann::json measure(const std::string& url, const std::string& args,
                       std::vector<std::string> prefix = {}) {
  const Exit done = rdmakit::testing::run(tool(url + " --json " + args, std::move(prefix)), 60s);
  EXPECT_TRUE(done.ok()) << done.describe();
  nlohmann::json j = last_json(done.output);
  EXPECT_TRUE(j.is_object()) << done.output;
  if (!j.is_object()) return j;
  EXPECT_GT(j["calls"].get<uint64_t>(), 0u) << done.output;
  EXPECT_EQ(j["errors"].get<uint64_t>(), 0u) << done.output;
  EXPECT_GT(j["calls_per_second"].get<double>(), 0.0);
  EXPECT_GT(j["latency_us"]["median"].get<double>(), 0.0);
  return j;
}

void measure_all_tests(const std::string& url, const std::string& extra = "",
                       const std::vector<std::string>& prefix = {}) {
  const nlohmann::json lat = measure(url, "-t latency -n 2000 " + extra, prefix);
  EXPECT_EQ(lat["test"], "latency");
  EXPECT_GE(lat["calls"].get<uint64_t>(), 2000u);
  const nlohmann::json rate = measure(url, "-t rate -c 2 -q 8 -D 0.3 " + extra, prefix);
  EXPECT_EQ(rate["clients"], 2);
  EXPECT_EQ(rate["depth"], 8);
  const nlohmann::json bw = measure(url, "-t bandwidth -s 1048576 -q 2 -D 0.3 " + extra, prefix);
  EXPECT_EQ(bw["request_bytes"], 1048576);
  EXPECT_EQ(bw["response_bytes"], 8);
}

TEST(RpcBench, InprocInOneProcess) {
  measure_all_tests("inproc://bench", "--threads 1");
}

TEST(RpcBench, ShmBetweenProcesses) {
  const std::string url = "shm://rpc-bench-test-" + std::to_string(getpid());
  rdmakit::testing::Process server(tool(url + " --serve -D 60"));
  measure_all_tests(url);
}

TEST(RpcBench, ShmBlockingMode) {
  const std::string url = "shm://rpc-bench-blocking-" + std::to_string(getpid());
  rdmakit::testing::Process server(tool(url + " --serve -D 60 --mode blocking"));
  const nlohmann::json lat = measure(url, "-t latency -n 500 --mode blocking");
  EXPECT_EQ(lat["mode"], "blocking");
}

TEST(RpcBench, TcpBetweenProcesses) {
  const int port = rdmakit::testing::free_tcp_port();
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  rdmakit::testing::Process server(tool(url + " --serve -D 60"));
  ASSERT_TRUE(rdmakit::testing::wait_listening(port, 10s));
  measure_all_tests(url);
}

TEST(RpcBench, TcpBetweenTwoHosts) {
  rdmakit::testing::TwoHosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "no network namespaces here: " << hosts.reason();
  const int port = rdmakit::testing::free_tcp_port();
  const std::string url = "tcp://" + hosts.address(0) + ":" + std::to_string(port);
  rdmakit::testing::Process server(tool(url + " --serve -D 60", hosts.on(0)));
  ASSERT_TRUE(rdmakit::testing::wait_listening(port, 10s, server.pid()));
  measure_all_tests(url, "", hosts.on(1));
}

// RDMA RC and UD on softrdma: the tool runs under softrdma-run, after the namespace prefix if
// any.
std::vector<std::string> on_softrdma(std::vector<std::string> prefix = {}) {
  prefix.push_back(SOFTRDMA_RUN);
  return prefix;
}

class RpcBenchRdma : public ::testing::TestWithParam<std::string> {};

TEST_P(RpcBenchRdma, BetweenProcesses) {
  const int port = rdmakit::testing::free_tcp_port();
  const std::string url = GetParam() + "://127.0.0.1:" + std::to_string(port);
  rdmakit::testing::Process server(tool(url + " --serve -D 60", on_softrdma()));
  ASSERT_TRUE(rdmakit::testing::wait_listening(port, 10s));
  measure_all_tests(url, "", on_softrdma());
  // Large messages (RC: by RDMA READ from a grant; UD: in datagrams): an 8 MiB request and
  // response.
  const nlohmann::json big = measure(url, "-t latency -s 8388608 -r 8388608 -n 3", on_softrdma());
  EXPECT_EQ(big["response_bytes"], 8388608);
}

TEST_P(RpcBenchRdma, BetweenTwoHosts) {
  rdmakit::testing::TwoHosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "no network namespaces here: " << hosts.reason();
  const int port = rdmakit::testing::free_tcp_port();
  const std::string url = GetParam() + "://" + hosts.address(0) + ":" + std::to_string(port);
  rdmakit::testing::Process server(tool(url + " --serve -D 60", on_softrdma(hosts.on(0))));
  ASSERT_TRUE(rdmakit::testing::wait_listening(port, 10s, server.pid()));
  measure_all_tests(url, "", on_softrdma(hosts.on(1)));
}

std::string transport_name(const ::testing::TestParamInfo<std::string>& param) {
  return param.param == "rc" ? "rc_rdma_cm" : param.param == "rc+tcp" ? "rc_tcp_exchange" : "ud";
}

INSTANTIATE_TEST_SUITE_P(Transports, RpcBenchRdma, ::testing::Values("rc", "rc+tcp", "ud"),
                         transport_name);

// UD across a link that loses 5 % of its packets and delays each by 20 ms: every call
// completes once with its own reply (rpc-bench numbers each call; the server refuses a
// request that runs twice, the client a reply to another call: both count as errors).
TEST(RpcBenchUd, LossyDelayedLinkBetweenTwoHosts) {
  rdmakit::testing::TwoHosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "no network namespaces here: " << hosts.reason();
  if (!hosts.impair("netem loss 5% delay 20ms"))
    GTEST_SKIP() << "no netem here: " << hosts.reason();
  const int port = rdmakit::testing::free_tcp_port();
  const std::string url = "ud://" + hosts.address(0) + ":" + std::to_string(port);
  rdmakit::testing::Process server(tool(url + " --serve -D 120", on_softrdma(hosts.on(0))));
  ASSERT_TRUE(rdmakit::testing::wait_listening(port, 30s, server.pid()));
  const nlohmann::json lat =
      measure(url, "-t latency -n 20 -s 6000 -r 6000", on_softrdma(hosts.on(1)));
  EXPECT_GE(lat["calls"].get<uint64_t>(), 20u);
  const nlohmann::json rate = measure(url, "-t rate -c 2 -q 8 -D 2", on_softrdma(hosts.on(1)));
  EXPECT_GT(rate["calls"].get<uint64_t>(), 16u);
}

// UD with datagrams dropped on purpose by the transport itself (RDMAKIT_UD_LOSS), so that
// its own retransmission and duplicate suppression do the work (softrdma's link between
// hosts is TCP, which hides netem's losses from UD).
TEST(RpcBenchUd, DroppedDatagramsAreSentAgainAndRunOnce) {
  const int port = rdmakit::testing::free_tcp_port();
  const std::string url = "ud://127.0.0.1:" + std::to_string(port);
  std::vector<std::string> lossy = {"env", "RDMAKIT_UD_LOSS=0.05", SOFTRDMA_RUN};
  rdmakit::testing::Process server(tool(url + " --serve -D 60", lossy));
  ASSERT_TRUE(rdmakit::testing::wait_listening(port, 10s));
  const nlohmann::json lat = measure(url, "-t latency -n 300 -s 9000 -r 9000", lossy);
  EXPECT_GE(lat["calls"].get<uint64_t>(), 300u);
  const nlohmann::json rate = measure(url, "-t rate -c 2 -q 16 -D 1", lossy);
  EXPECT_GT(rate["calls"].get<uint64_t>(), 32u);
}

TEST(RpcBench, ReportsAServerThatIsNotThere) {
  const Exit done = rdmakit::testing::run(tool("shm://nobody-listens-here -t latency -n 10"), 30s);
  EXPECT_FALSE(done.ok());
  EXPECT_NE(done.output.find("nothing listens"), std::string::npos) << done.output;
}

}  // namespace

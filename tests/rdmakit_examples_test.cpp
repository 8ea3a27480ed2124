// rdmakit's examples run as a user runs them: the server and the client as two processes on
// softrdma, on one host and on two (network namespaces), both back ends for the client/server
// example. Each run must end with both exit statuses 0 and the lines that report success.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "support/listening.hpp"
#include "support/subprocess.hpp"
#include "support/two_hosts.hpp"

namespace {

using namespace std::chrono_literals;
using rdmakit::testing::Exit;
using rdmakit::testing::Process;
using rdmakit::testing::TwoHosts;

struct Example {
  std::string name;
  std::string server;  // "{port}" (also inside a word) is replaced by a free port
  std::string client;  // "{server}" by the server's address
  std::vector<std::string> server_says;
  std::vector<std::string> client_says;
};

struct Case {
  Example example;
  bool two_hosts;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.example.name << (c.two_hosts ? " on two hosts" : " on one host");
}

std::vector<std::string> command(std::vector<std::string> argv, const std::string& line, int port,
                                 const std::string& server) {
  argv.push_back(SOFTRDMA_RUN);
  auto replace = [](std::string& word, const std::string& from, const std::string& to) {
    if (size_t at = word.find(from); at != std::string::npos) word.replace(at, from.size(), to);
  };
  for (std::string word : rdmakit::testing::words(line)) {
    replace(word, "{port}", std::to_string(port));
    replace(word, "{server}", server);
    argv.push_back(word);
  }
  return argv;
}

void expect_lines(const Exit& run, const std::vector<std::string>& lines, const char* who) {
  for (const std::string& line : lines)
    EXPECT_NE(run.output.find(line), std::string::npos)
        << who << " did not print \"" << line << "\":\n"
        << run.output;
}

class Examples : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { hosts_ = std::make_unique<TwoHosts>(); }
  static void TearDownTestSuite() { hosts_.reset(); }
  static std::unique_ptr<TwoHosts> hosts_;
};
std::unique_ptr<TwoHosts> Examples::hosts_;

TEST_P(Examples, ServerAndClientSucceed) {
  const Example& e = GetParam().example;
  const bool two_hosts = GetParam().two_hosts;
  if (two_hosts && !hosts_->ok()) GTEST_SKIP() << "no network namespaces: " << hosts_->reason();
  const int port = rdmakit::testing::free_tcp_port();
  const std::string address = two_hosts ? hosts_->address(0) : "127.0.0.1";
  const std::vector<std::string> here;
  Process server(command(two_hosts ? hosts_->on(0) : here, e.server, port, address));
  // The RDMA CM listens on the same TCP port in softrdma, so this works for both back ends.
  ASSERT_TRUE(rdmakit::testing::wait_listening(port, 10s, two_hosts ? server.pid() : 0))
      << "the server did not listen:\n"
      << server.wait(1s).describe();
  const Exit client = rdmakit::testing::run(
      command(two_hosts ? hosts_->on(1) : here, e.client, port, address), 60s);
  const Exit served = server.wait(30s);
  EXPECT_TRUE(client.ok()) << "client: " << client.describe();
  EXPECT_TRUE(served.ok()) << "server: " << served.describe();
  expect_lines(client, e.client_says, "the client");
  expect_lines(served, e.server_says, "the server");
}

std::vector<Example> examples() {
  const std::string client_server = RDMAKIT_CLIENT_SERVER;
  const std::string kv = RDMAKIT_KV_LOOKUP;
  const std::string echo = RDMAKIT_COROUTINE_ECHO;
  const std::string first = RDMAKIT_FIRST_WRITE;
  const std::string rpc_echo = RDMAKIT_RPC_ECHO;
  std::vector<Example> out;
  out.push_back({"first_write",
                 first + " server {port}",
                 first + " client {server} {port}",
                 {"server: received \"hello over RDMA\""},
                 {"client: RC QP", "client: write done"}});
  for (const std::string backend : {"tcp", "rdma_cm"}) {
    const std::string flag = backend == "tcp" ? "" : " --cm";
    out.push_back(
        {"client_server_" + backend,
         client_server + " server --port {port}" + flag,
         client_server + " client {server} --port {port} --size 65536 --iterations 200" + flag,
         {"server: client connected: RC QP", "via " + backend, "client said \"done\""},
         {"client: connected: RC QP", "via " + backend,
          "client: RDMA WRITE     4096 B x 200: latency",
          "client: RDMA READ      4096 B x 200: latency",
          "client: RDMA WRITE    65536 B x 200: latency",
          "client: RDMA READ     65536 B x 200: latency", "MiB/s",
          "client: data read back matches what was written"}});
  }
  out.push_back({"kv_lookup",
                 kv + " server --port {port} --keys 3000",
                 kv + " client {server} --port {port} --lookups 20000",
                 {"server: 3000 keys in 4096 slots", "granted the table read-only for 60 s",
                  "server: client said goodbye; grant revoked"},
                 {"client: table of 3000 keys, 262144 bytes, readable for", "20000 lookups in",
                  "lookups/s, average latency", "client: every lookup found the right value"}});
  out.push_back(
      {"coroutine_echo",
       echo + " server --port {port} --clients 6",
       echo + " client {server} --port {port} --clients 6 --messages 300 --size 1000",
       {"server: client 6 connected", "server: echoed 1800 messages for 6 clients, 0 lost"},
       {"client: 6 connections", "client: 1800 round trips of 1000 B", "round trips/s",
        "client: every echo matched"}});
  out.push_back({"rpc_echo_tcp",
                 rpc_echo + " server tcp://0.0.0.0:{port} --sessions 1",
                 rpc_echo + " client tcp://{server}:{port} --calls 2000",
                 {"served 1 client"},
                 {"call 1 -> \"WORD 1\"", "2000 calls answered, 0 failed",
                  "2000 of 2000 coroutine calls answered correctly"}});
  return out;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const Example& e : examples()) {
    out.push_back({e, false});
    out.push_back({e, true});
  }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.example.name + (info.param.two_hosts ? "_two_hosts" : "_one_host");
}

INSTANTIATE_TEST_SUITE_P(Rdmakit, Examples, ::testing::ValuesIn(cases()), case_name);

// The RPC example over shared memory and in one process (no port to wait for).
TEST(RpcEcho, ShmServerAndClientProcesses) {
  const std::string url = "shm://rpc-echo-test-" + std::to_string(getpid());
  Process server({RDMAKIT_RPC_ECHO, "server", url, "--sessions", "1"});
  Exit client;
  for (int attempt = 0; attempt < 100; ++attempt) {  // until the server listens
    client = rdmakit::testing::run({RDMAKIT_RPC_ECHO, "client", url, "--calls", "2000"}, 60s);
    if (client.output.find("nothing listens") == std::string::npos) break;
    usleep(50000);
  }
  const Exit served = server.wait(30s);
  EXPECT_TRUE(client.ok()) << client.describe();
  EXPECT_TRUE(served.ok()) << served.describe();
  expect_lines(client, {"2000 calls answered, 0 failed", "2000 of 2000 coroutine calls"}, "client");
  expect_lines(served, {"served 1 client"}, "server");
}

TEST(RpcEcho, InprocBothInOneProcess) {
  const Exit run = rdmakit::testing::run({RDMAKIT_RPC_ECHO, "both", "inproc://echo"}, 60s);
  EXPECT_TRUE(run.ok()) << run.describe();
  expect_lines(run, {"1000 calls answered, 0 failed", "1000 of 1000 coroutine calls"}, "rpc_echo");
}

}  // namespace

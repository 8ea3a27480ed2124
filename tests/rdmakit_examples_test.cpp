// rdmakit's examples run as a user runs them: the server and the client as two processes on
// softrdma, on one host and on two (network namespaces), both back ends for the client/server
// example. Each run must end with both exit statuses 0 and the lines that report success.
#include <gtest/gtest.h>

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
  std::string server;  // {port} is replaced by a free port
  std::string client;  // {server} by the server's address
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
  for (std::string word : rdmakit::testing::words(line)) {
    if (word == "{port}") word = std::to_string(port);
    if (word == "{server}") word = server;
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

}  // namespace

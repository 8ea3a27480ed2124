// Debian's unmodified verbs clients on softrdma with server and client on two hosts
// (network namespaces joined by veth): the TCP transport.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "support/listening.hpp"
#include "support/subprocess.hpp"
#include "support/two_hosts.hpp"

using namespace std::chrono_literals;
using rdmakit::testing::free_tcp_port;
using rdmakit::testing::Process;
using rdmakit::testing::TwoHosts;
using rdmakit::testing::wait_listening;
using rdmakit::testing::words;

namespace {

struct PairCase {
  std::string name;
  std::string program;
  std::string args;
};

std::ostream& operator<<(std::ostream& os, const PairCase& c) {
  return os << c.program << " " << c.args;
}

class ClientPairTwoHosts : public ::testing::TestWithParam<PairCase> {
 protected:
  static void SetUpTestSuite() { hosts_ = std::make_unique<TwoHosts>(); }
  static void TearDownTestSuite() { hosts_.reset(); }

  std::vector<std::string> command(int host, const PairCase& c, int port) {
    std::vector<std::string> argv = hosts_->on(host);
    argv.push_back(SOFTRDMA_RUN);
    argv.push_back(c.program);
    for (auto& w : words(c.args)) argv.push_back(w);
    argv.push_back("-p");
    argv.push_back(std::to_string(port));
    return argv;
  }

  static std::unique_ptr<TwoHosts> hosts_;
};
std::unique_ptr<TwoHosts> ClientPairTwoHosts::hosts_;

TEST_P(ClientPairTwoHosts, CompletesAcrossHosts) {
  if (!hosts_->ok()) GTEST_SKIP() << "no network namespaces here: " << hosts_->reason();
  const PairCase& c = GetParam();
  const int port = free_tcp_port();
  Process server(command(0, c, port));
  ASSERT_TRUE(wait_listening(port, 10s, server.pid())) << "server did not listen";
  auto client_argv = command(1, c, port);
  client_argv.push_back(hosts_->address(0));
  auto client = rdmakit::testing::run(client_argv, 120s);
  auto served = server.wait(30s);
  EXPECT_TRUE(client.ok()) << "client: " << client.describe();
  EXPECT_TRUE(served.ok()) << "server: " << served.describe();
}

std::string case_name(const ::testing::TestParamInfo<PairCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(
    Pingpong, ClientPairTwoHosts,
    ::testing::Values(PairCase{"rc_1B", "ibv_rc_pingpong", "-g 0 -c -s 1 -n 200"},
                      PairCase{"rc_1MiB", "ibv_rc_pingpong", "-g 0 -c -s 1048576 -n 20"},
                      PairCase{"rc_events", "ibv_rc_pingpong", "-g 0 -c -e -s 65536 -n 200"},
                      PairCase{"ud_1B", "ibv_ud_pingpong", "-g 0 -c -s 1 -n 200"},
                      PairCase{"ud_mtu_events", "ibv_ud_pingpong", "-g 0 -c -e -s 4096 -n 200"},
                      PairCase{"srq", "ibv_srq_pingpong", "-g 0 -c -n 200"},
                      PairCase{"srq_1MiB_events", "ibv_srq_pingpong",
                               "-g 0 -c -e -s 1048576 -n 10"}),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    Perftest, ClientPairTwoHosts,
    ::testing::Values(PairCase{"write_bw_all_sizes", "ib_write_bw", "-a -n 50"},
                      PairCase{"read_bw_all_sizes", "ib_read_bw", "-a -n 50"},
                      PairCase{"send_bw_all_sizes", "ib_send_bw", "-a -n 50"},
                      PairCase{"atomic_bw", "ib_atomic_bw", "-n 500"},
                      PairCase{"write_lat_all_sizes", "ib_write_lat", "-a -n 50"},
                      PairCase{"read_lat_all_sizes", "ib_read_lat", "-a -n 50"},
                      PairCase{"send_lat_all_sizes", "ib_send_lat", "-a -n 50"},
                      PairCase{"atomic_lat", "ib_atomic_lat", "-n 500"}),
    case_name);

}  // namespace

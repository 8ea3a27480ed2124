// Debian's unmodified verbs clients (ibverbs-utils, perftest) on softrdma, server and
// client on one host.
#include <gtest/gtest.h>

#include <string>

#include "support/listening.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;
using rdmakit::testing::free_tcp_port;
using rdmakit::testing::Process;
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

std::vector<std::string> command(const PairCase& c, int port) {
  std::vector<std::string> argv{SOFTRDMA_RUN, c.program};
  for (auto& w : words(c.args)) argv.push_back(w);
  argv.push_back("-p");
  argv.push_back(std::to_string(port));
  return argv;
}

class ClientPair : public ::testing::TestWithParam<PairCase> {};

TEST_P(ClientPair, CompletesOnOneHost) {
  const PairCase& c = GetParam();
  const int port = free_tcp_port();
  Process server(command(c, port));
  ASSERT_TRUE(wait_listening(port, 10s)) << "server did not listen";
  auto client_argv = command(c, port);
  client_argv.push_back("127.0.0.1");
  auto client = rdmakit::testing::run(client_argv, 120s);
  auto served = server.wait(30s);
  EXPECT_TRUE(client.ok()) << "client: " << client.describe();
  EXPECT_TRUE(served.ok()) << "server: " << served.describe();
}

std::string case_name(const ::testing::TestParamInfo<PairCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(
    Pingpong, ClientPair,
    ::testing::Values(PairCase{"rc_1B", "ibv_rc_pingpong", "-g 0 -c -s 1"},
                      PairCase{"rc_4KiB", "ibv_rc_pingpong", "-g 0 -c -s 4096"},
                      PairCase{"rc_1MiB", "ibv_rc_pingpong", "-g 0 -c -s 1048576 -n 50"},
                      PairCase{"rc_events", "ibv_rc_pingpong", "-g 0 -c -e -s 65536"},
                      PairCase{"rc_without_gid", "ibv_rc_pingpong", "-c"},
                      PairCase{"ud_1B", "ibv_ud_pingpong", "-g 0 -c -s 1"},
                      PairCase{"ud_mtu", "ibv_ud_pingpong", "-g 0 -c -s 4096"},
                      PairCase{"ud_events", "ibv_ud_pingpong", "-g 0 -c -e -s 2048"},
                      PairCase{"srq_default", "ibv_srq_pingpong", "-g 0 -c"},
                      PairCase{"srq_1MiB", "ibv_srq_pingpong", "-g 0 -c -s 1048576 -n 20"},
                      PairCase{"srq_events", "ibv_srq_pingpong", "-g 0 -c -e -q 4"}),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    Perftest, ClientPair,
    ::testing::Values(PairCase{"write_bw_all_sizes", "ib_write_bw", "-a -n 200"},
                      PairCase{"read_bw_all_sizes", "ib_read_bw", "-a -n 200"},
                      PairCase{"send_bw_all_sizes", "ib_send_bw", "-a -n 200"},
                      PairCase{"atomic_bw", "ib_atomic_bw", "-n 2000"},
                      PairCase{"write_lat_all_sizes", "ib_write_lat", "-a -n 100"},
                      PairCase{"read_lat_all_sizes", "ib_read_lat", "-a -n 100"},
                      PairCase{"send_lat_all_sizes", "ib_send_lat", "-a -n 100"},
                      PairCase{"atomic_lat", "ib_atomic_lat", "-n 2000"},
                      PairCase{"send_lat_events", "ib_send_lat", "-e -s 4096 -n 500"},
                      PairCase{"send_bw_events", "ib_send_bw", "-e -s 4096 -n 500"}),
    case_name);

}  // namespace

// Debian's unmodified verbs clients (ibverbs-utils, perftest) on softrdma, server and
// client on one host.
#include <gtest/gtest.h>

#include <string>

#include "support/client_pair.hpp"
#include "support/listening.hpp"
#include "support/subprocess.hpp"

namespace {

using rdmakit::testing::PairCase;
using rdmakit::testing::Placement;
using rdmakit::testing::same_program;

class ClientPair : public ::testing::TestWithParam<PairCase> {};

TEST_P(ClientPair, CompletesOnOneHost) {
  rdmakit::testing::run_pair(GetParam(), Placement::kThisHost, nullptr);
}

// Without -g there is no GRH, which the RoCE port refuses at RTR as a RoCE NIC does: the
// program stops with its own message instead of working here and failing across hosts.
TEST(ClientWithoutGid, RcPingpongIsRefusedAtRtr) {
  using namespace std::chrono_literals;
  using rdmakit::testing::Process;
  const int port = rdmakit::testing::free_tcp_port();
  Process server({SOFTRDMA_RUN, "ibv_rc_pingpong", "-p", std::to_string(port)});
  ASSERT_TRUE(rdmakit::testing::wait_listening(port, 10s));
  Process client({SOFTRDMA_RUN, "ibv_rc_pingpong", "-p", std::to_string(port), "127.0.0.1"});
  const auto c = client.wait(30s);
  const auto s = server.wait(30s);
  // The server moves its QP to RTR first and stops there; the client then loses it.
  EXPECT_FALSE(s.ok()) << s.output;
  EXPECT_NE(s.output.find("Failed to modify QP to RTR"), std::string::npos) << s.output;
  EXPECT_FALSE(c.ok()) << c.output;
}

std::string case_name(const ::testing::TestParamInfo<PairCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(
    Pingpong, ClientPair,
    ::testing::Values(same_program("rc_1B", "ibv_rc_pingpong -g 0 -c -s 1"),
                      same_program("rc_4KiB", "ibv_rc_pingpong -g 0 -c -s 4096"),
                      same_program("rc_1MiB", "ibv_rc_pingpong -g 0 -c -s 1048576 -n 50"),
                      same_program("rc_events", "ibv_rc_pingpong -g 0 -c -e -s 65536"),
                      same_program("ud_1B", "ibv_ud_pingpong -g 0 -c -s 1"),
                      same_program("ud_mtu", "ibv_ud_pingpong -g 0 -c -s 4096"),
                      same_program("ud_events", "ibv_ud_pingpong -g 0 -c -e -s 2048"),
                      same_program("srq_default", "ibv_srq_pingpong -g 0 -c"),
                      same_program("srq_1MiB", "ibv_srq_pingpong -g 0 -c -s 1048576 -n 20"),
                      same_program("srq_events", "ibv_srq_pingpong -g 0 -c -e -q 4"),
                      same_program("xrc_srq", "ibv_xsrq_pingpong -g 0 -n 100"),
                      same_program("xrc_srq_events", "ibv_xsrq_pingpong -g 0 -e -s 65536 -n 50"),
                      same_program("uc_4KiB", "ibv_uc_pingpong -g 0 -c -s 4096"),
                      same_program("uc_events", "ibv_uc_pingpong -g 0 -c -e -s 65536")),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    Perftest, ClientPair,
    ::testing::Values(same_program("write_bw_all_sizes", "ib_write_bw -a -n 200"),
                      same_program("read_bw_all_sizes", "ib_read_bw -a -n 200"),
                      same_program("send_bw_all_sizes", "ib_send_bw -a -n 200"),
                      same_program("atomic_bw", "ib_atomic_bw -n 2000"),
                      same_program("write_lat_all_sizes", "ib_write_lat -a -n 100"),
                      same_program("read_lat_all_sizes", "ib_read_lat -a -n 100"),
                      same_program("send_lat_all_sizes", "ib_send_lat -a -n 100"),
                      same_program("atomic_lat", "ib_atomic_lat -n 2000"),
                      same_program("send_lat_events", "ib_send_lat -e -s 4096 -n 500"),
                      same_program("send_bw_events", "ib_send_bw -e -s 4096 -n 500"),
                      same_program("write_bw_uc_all_sizes", "ib_write_bw -c UC -a -n 200"),
                      same_program("write_lat_uc", "ib_write_lat -c UC -s 8 -n 1000"),
                      same_program("send_lat_uc", "ib_send_lat -c UC -s 64 -n 1000"),
                      // On-demand paging: regions reached through the owner's address space.
                      same_program("write_bw_odp_all_sizes", "ib_write_bw --odp -a -n 100"),
                      same_program("send_bw_odp_all_sizes", "ib_send_bw --odp -a -n 100"),
                      same_program("read_lat_odp", "ib_read_lat --odp -s 4096 -n 500")),
    case_name);

}  // namespace

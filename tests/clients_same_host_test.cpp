// Debian's unmodified verbs clients (ibverbs-utils, perftest) on softrdma, server and
// client on one host.
#include <gtest/gtest.h>

#include "support/client_pair.hpp"

namespace {

using rdmakit::testing::PairCase;
using rdmakit::testing::Placement;
using rdmakit::testing::same_program;

class ClientPair : public ::testing::TestWithParam<PairCase> {};

TEST_P(ClientPair, CompletesOnOneHost) {
  rdmakit::testing::run_pair(GetParam(), Placement::kThisHost, nullptr);
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
                      same_program("rc_without_gid", "ibv_rc_pingpong -c"),
                      same_program("ud_1B", "ibv_ud_pingpong -g 0 -c -s 1"),
                      same_program("ud_mtu", "ibv_ud_pingpong -g 0 -c -s 4096"),
                      same_program("ud_events", "ibv_ud_pingpong -g 0 -c -e -s 2048"),
                      same_program("srq_default", "ibv_srq_pingpong -g 0 -c"),
                      same_program("srq_1MiB", "ibv_srq_pingpong -g 0 -c -s 1048576 -n 20"),
                      same_program("srq_events", "ibv_srq_pingpong -g 0 -c -e -q 4")),
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
                      same_program("send_bw_events", "ib_send_bw -e -s 4096 -n 500")),
    case_name);

}  // namespace

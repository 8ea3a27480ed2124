// Debian's unmodified RDMA CM clients (rdmacm-utils, perftest -R) on softrdma's
// librdmacm.so.1: server and client on one host (a network namespace of the test's own, as
// udaddy's port is fixed) and on two hosts.
#include <gtest/gtest.h>

#include <memory>

#include "support/client_pair.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;

namespace {

using rdmakit::testing::PairCase;
using rdmakit::testing::Placement;
using rdmakit::testing::same_program;
using rdmakit::testing::TwoHosts;

struct CmCase {
  PairCase pair;
  Placement where;
};

std::ostream& operator<<(std::ostream& os, const CmCase& c) {
  return os << c.pair.client;
}

class CmClients : public ::testing::TestWithParam<CmCase> {
 protected:
  static void SetUpTestSuite() { hosts_ = std::make_unique<TwoHosts>(); }
  static void TearDownTestSuite() { hosts_.reset(); }
  static std::unique_ptr<TwoHosts> hosts_;
};
std::unique_ptr<TwoHosts> CmClients::hosts_;

TEST_P(CmClients, Complete) {
  if (!hosts_->ok()) GTEST_SKIP() << "no network namespaces here: " << hosts_->reason();
  rdmakit::testing::run_pair(GetParam().pair, GetParam().where, hosts_.get());
}

std::vector<PairCase> cm_programs() {
  const std::string rping_server = "rping -s -a {server} -p {port}";
  const std::string rping_client = "rping -c -v -a {server} -p {port}";
  std::vector<PairCase> c = {
      {"rping_1x64B", rping_server + " -C 1 -S 64", rping_client + " -C 1 -S 64"},
      {"rping_10x4KiB", rping_server + " -C 10 -S 4096", rping_client + " -C 10 -S 4096"},
      {"rping_100x1KiB", rping_server + " -C 100 -S 1024", rping_client + " -C 100 -S 1024"},
      {"rping_5x32KiB", rping_server + " -C 5 -S 32768", rping_client + " -C 5 -S 32768"},
      {"rping_own_qp", rping_server + " -C 10 -q", rping_client + " -C 10 -q"},
      {"ucmatose_4", "ucmatose -p {port} -c 4 -C 20", "ucmatose -s {server} -p {port} -c 4 -C 20"},
      {"udaddy_2", "udaddy -c 2", "udaddy -s {server} -c 2", 7174},
      {"rdma_server_client", "rdma_server -p {port}", "rdma_client -s {server} -p {port}"},
      {"rdma_xserver_xclient", "rdma_xserver -p {port}", "rdma_xclient -s {server} -p {port}"},
      // Our own example of the classic workflow (examples/rdma_client_server.cpp).
      {"example_client_server", std::string(RDMAKIT_EXAMPLE) + " --server --port {port}",
       std::string(RDMAKIT_EXAMPLE) + " --client {server} --port {port} --size 65536 --iters 500"},
  };
  for (const char* tool : {"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw",
                           "ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_atomic_lat"})
    c.push_back(same_program(std::string("perftest_") + (tool + 3) + "_R",
                             std::string(tool) + " -R -n 200"));
  c.push_back(same_program("perftest_send_bw_UD_R", "ib_send_bw -c UD -R -n 200"));
  return c;
}

std::vector<CmCase> all_cases() {
  std::vector<CmCase> out;
  for (const PairCase& p : cm_programs()) {
    out.push_back({p, Placement::kPrivateHost});
    out.push_back({p, Placement::kTwoHosts});
  }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<CmCase>& info) {
  return info.param.pair.name +
         (info.param.where == Placement::kTwoHosts ? "_two_hosts" : "_one_host");
}

INSTANTIATE_TEST_SUITE_P(RdmacmUtils, CmClients, ::testing::ValuesIn(all_cases()), case_name);

// mckey: a receiver joins a multicast group, then a sender joins it send-only (-o) or as a
// full member and sends; every message reaches the receiver, on one host and across two.
class Mckey : public ::testing::TestWithParam<bool> {};

TEST_P(Mckey, TheReceiverGetsEveryMessage) {
  const bool two_hosts = GetParam();
  TwoHosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "no network namespaces here: " << hosts.reason();
  const std::string group = "239.1.2.3";
  const auto mckey = [&](int host, const std::vector<std::string>& args) {
    std::vector<std::string> argv = hosts.on(host);
    argv.insert(argv.end(), {SOFTRDMA_RUN, "stdbuf", "-oL", "mckey", "-m", group, "-b",
                             hosts.address(host)});  // line-buffered: its progress is read
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  };
  const int sender_host = two_hosts ? 1 : 0;
  rdmakit::testing::Process receiver(mckey(0, {"-C", "20"}));
  ASSERT_TRUE(receiver.printed("receiving data transfers", 10s)) << "the receiver did not join";
  const auto sent = rdmakit::testing::run(mckey(sender_host, {"-s", "-C", "20"}), 30s);
  const auto received = receiver.wait(10s);
  EXPECT_TRUE(sent.ok()) << sent.describe() << "\n" << sent.output;
  EXPECT_TRUE(received.ok()) << received.describe() << "\n" << received.output;
  EXPECT_NE(received.output.find("data transfers complete"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(RdmacmUtils, Mckey, ::testing::Values(false, true),
                         [](const auto& param_info) {
                           return std::string(param_info.param ? "two_hosts" : "one_host");
                         });

}  // namespace

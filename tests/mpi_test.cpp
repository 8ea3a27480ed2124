// MPI over UCX over softrdma: Debian's Open MPI with its UCX PML and UCX's osc runs
// tests/mpi/mpi_checks.cpp (ping-pong, bandwidth with the data checked, MPI_Allreduce,
// MPI_Put/MPI_Get) with 2 and 4 ranks on one host and with ranks in two network namespaces.
// UCX may use only the verbs transport under test (UCX_TLS), and its own log must show that
// transport on softrdma0 carrying tag matching and one-sided traffic: neither shared memory
// nor TCP did the work.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "support/subprocess.hpp"
#include "support/two_hosts.hpp"

using namespace std::chrono_literals;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

struct MpiCase {
  std::string name;
  std::string transport;  // UCX's: rc_verbs (with ud_verbs to wire it up) or ud_verbs
  int ranks;
  bool two_hosts;
};

void PrintTo(const MpiCase& c, std::ostream* os) {
  *os << c.name;
}

class MpiOverUcx : public ::testing::TestWithParam<MpiCase> {
 protected:
  static void SetUpTestSuite() { hosts_ = std::make_unique<rdmakit::testing::TwoHosts>(); }
  static void TearDownTestSuite() { hosts_.reset(); }
  static std::unique_ptr<rdmakit::testing::TwoHosts> hosts_;
};
std::unique_ptr<rdmakit::testing::TwoHosts> MpiOverUcx::hosts_;

std::vector<std::string> mpirun_argv(const MpiCase& c, const rdmakit::testing::TwoHosts& hosts,
                                     const std::string& session_dir) {
  const std::string tls = c.transport == "rc_verbs" ? "rc_verbs,ud_verbs,self" : "ud_verbs,self";
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(c.ranks), "--oversubscribe",
                                   // Ranks on two "hosts" share this machine's two cores.
                                   "--bind-to", "none",
                                   // The daemons' shared topology segment is only a speed-up,
                                   // and Open MPI 4.1 places it in a guessed address-space hole
                                   // that can collide with the stack (orted crashed in
                                   // hwloc_shmem_topology_write, about 1 run in 20).
                                   "--mca", "rtc_hwloc_vmhole", "none",
                                   // Every "host" shares this /tmp: the daemons' session
                                   // directories of one run must not meet another's (job
                                   // family numbers are a hash and collide).
                                   "--mca", "orte_tmpdir_base", session_dir, "--mca", "pml", "ucx",
                                   "--mca", "osc", "ucx", "--mca", "btl", "self", "-x",
                                   "UCX_TLS=" + tls, "-x", "UCX_NET_DEVICES=softrdma0:1", "-x",
                                   "UCX_LOG_LEVEL=info"};
  if (geteuid() == 0) argv.insert(argv.begin() + 1, "--allow-run-as-root");
  if (c.two_hosts) {
    const std::string per_host = std::to_string(c.ranks / 2);
    const std::string subnet = std::regex_replace(hosts.address(0), std::regex(R"(\.\d+$)"), ".0");
    for (const std::string& a :
         {std::string("--host"),
          hosts.name(0) + ":" + per_host + "," + hosts.name(1) + ":" + per_host,
          std::string("--mca"), std::string("plm_rsh_agent"), std::string(MPI_NETNS_AGENT),
          std::string("--mca"), std::string("oob_tcp_if_include"), subnet + "/24"})
      argv.push_back(a);
  }
  argv.push_back(MPI_CHECKS);
  return argv;
}

TEST_P(MpiOverUcx, ChecksPassAndTheVerbsTransportCarriedThem) {
  const MpiCase& c = GetParam();
  if (c.two_hosts && !hosts_->ok())
    GTEST_SKIP() << "no network namespaces here: " << hosts_->reason();
  std::vector<std::string> argv = c.two_hosts ? hosts_->on(0) : std::vector<std::string>{};
  argv.push_back(SOFTRDMA_RUN);
  char pattern[] = "/tmp/rdmakit-mpi-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string session_dir = pattern;
  for (const std::string& a : mpirun_argv(c, *hosts_, session_dir)) argv.push_back(a);
  const auto e = rdmakit::testing::run(argv, 240s, {std::string("SOFTRDMA_RUN=") + SOFTRDMA_RUN});
  std::error_code ignored;
  std::filesystem::remove_all(session_dir, ignored);
  ASSERT_TRUE(e.ok()) << e.describe() << "\n" << e.output;
  const std::string& out = e.output;
  EXPECT_THAT(out, HasSubstr("all checks passed on " + std::to_string(c.ranks) + " ranks"));
  for (const char* check : {"ping-pong latency            ok", "bandwidth, data verified     ok",
                            "MPI_Allreduce 16 x int64     ok", "MPI_Allreduce 1 Mi x int64   ok",
                            "MPI_Put / MPI_Get            ok"})
    EXPECT_THAT(out, HasSubstr(check));
  // UCX's INFO lines name the transports of each endpoint configuration.
  const std::string device = c.transport + "/softrdma0:1";
  EXPECT_THAT(out, HasSubstr("tag(" + device));
  // ud_verbs has no RDMA: UCX carries MPI_Put/MPI_Get over it as active messages (rma_am).
  EXPECT_THAT(out, ContainsRegex("rma(_am)?\\(" + device));
  for (const char* other : {"tcp/", "posix/", "sysv/", "cma/"})
    EXPECT_THAT(out, Not(HasSubstr(other)));
}

std::string case_name(const ::testing::TestParamInfo<MpiCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Ranks, MpiOverUcx,
                         ::testing::Values(MpiCase{"rc_2_ranks_one_host", "rc_verbs", 2, false},
                                           MpiCase{"rc_4_ranks_one_host", "rc_verbs", 4, false},
                                           MpiCase{"ud_4_ranks_one_host", "ud_verbs", 4, false},
                                           MpiCase{"rc_2_ranks_two_hosts", "rc_verbs", 2, true},
                                           MpiCase{"rc_4_ranks_two_hosts", "rc_verbs", 4, true},
                                           MpiCase{"ud_2_ranks_two_hosts", "ud_verbs", 2, true}),
                         case_name);

}  // namespace

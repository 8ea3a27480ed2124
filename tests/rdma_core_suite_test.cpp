// rdma-core's own Python test suite (Debian's python3-pyverbs ships it, gzipped, under
// /usr/share/doc/rdma-core/tests), unmodified, on softrdma: no failure and no error, and the
// tests of what softrdma implements run rather than skip.
// The summary and every distinct skip reason are printed, so what is still skipped shows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "support/subprocess.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr const char* kShippedSuite = "/usr/share/doc/rdma-core/tests";
// Debian's interpreter: pyverbs is built for it, not for another python3 on PATH.
constexpr const char* kPython = "/usr/bin/python3";

// Tests of what softrdma implements (the RDMA CM through the device's sysfs view, the extended
// QP and CQ, UC, ibv_rereg_mr, memory windows, ODP, multicast, parent domains, XRC): a skip of any
// of them is a failure, not a gap.
constexpr const char* kMustPass[] = {"test_rdmacm_sync_traffic",
                                     "test_rdmacm_async_traffic",
                                     "test_rdmacm_async_read",
                                     "test_rdmacm_async_write",
                                     "test_rdmacm_async_reject_traffic",
                                     "test_rdmacm_async_traffic_external_qp",
                                     "test_rdmacm_async_udp_traffic",
                                     "test_qp_ex_rc_send",
                                     "test_qp_ex_rc_rdma_write_imm",
                                     "test_qp_ex_rc_atomic_cmp_swp",
                                     "test_qp_ex_ud_send",
                                     "test_rc_traffic_cq_ex",
                                     "test_ud_traffic_cq_ex",
                                     "test_create_uc_qp_ex_with_attr",
                                     "test_query_uc_qp",
                                     "test_mr_rereg_access",
                                     "test_mr_rereg_addr",
                                     "test_mr_rereg_pd",
                                     "test_mw_type1",
                                     "test_invalidate_mw_type1",
                                     "test_mw_type2",
                                     "test_mw_type2_invalidate_local",
                                     "test_mw_type2_invalidate_remote",
                                     "test_mw_type2_invalidate_dealloc",
                                     "test_qp_ex_rc_bind_mw",
                                     "test_qp_ex_rc_atomic_write",
                                     "test_odp_rc_traffic",
                                     "test_odp_implicit_rc_traffic",
                                     "test_odp_ud_traffic",
                                     "test_odp_rc_srq_traffic",
                                     "test_odp_rc_rdma_read",
                                     "test_odp_rc_atomic_fetch_and_add",
                                     "test_odp_sync_prefetch_rc_traffic",
                                     "test_rdmacm_async_multicast_traffic",
                                     "test_rdmacm_async_ex_multicast_traffic",
                                     "test_rdmacm_async_ex_leave_multicast_traffic",
                                     "test_default_allocators_rc_traffic",
                                     "test_without_allocators_rc_traffic",
                                     "test_mem_align_rc_traffic",
                                     "test_mem_align_ud_traffic",
                                     "test_mem_align_srq_excq_rc_traffic",
                                     "test_qp_ex_xrc_send",
                                     "test_qp_ex_xrc_send_imm",
                                     "test_xrc_traffic_cq_ex",
                                     "test_odp_xrc_traffic",
                                     "test_xrc_atomic_fetch_and_add",
                                     "test_xrc_atomic_cmp_and_swap",
                                     "test_ro_xrc_traffic"};

struct SuiteResult {
  int passed = 0, failed = 0, errors = 0, skipped = 0;
  std::map<std::string, int> skip_reasons;
  std::map<std::string, std::string> verdicts;  // test name -> ok, ERROR, FAIL or the skip
};

// unittest's verbose lines: "name (module.Class.name) ... ok|skipped 'why'|ERROR|FAIL"; the
// docstring of a test may put the verdict on a line of its own.
SuiteResult parse(const std::string& output) {
  SuiteResult r;
  // Python quotes a reason with an apostrophe in double quotes.
  static const std::regex verdict(R"(\.\.\. (ok|ERROR|FAIL|skipped ['"](.*)['"])\s*$)");
  static const std::regex test_name(R"(^(test_\w+) \()");
  std::string current;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, test_name)) current = m[1];
    if (!std::regex_search(line, m, verdict)) continue;
    r.verdicts[current] = m[1];
    if (m[1] == "ok")
      ++r.passed;
    else if (m[1] == "ERROR")
      ++r.errors;
    else if (m[1] == "FAIL")
      ++r.failed;
    else
      ++r.skipped, ++r.skip_reasons[m[2].str().substr(0, 100)];
  }
  return r;
}

class RdmaCoreSuite : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(fs::path(kShippedSuite) / "run_tests.py.gz") &&
        !fs::exists(fs::path(kShippedSuite) / "run_tests.py"))
      GTEST_SKIP() << "rdma-core's tests are not installed (Debian: python3-pyverbs)";
    char pattern[] = "/tmp/rdma-core-suite-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    // Imported as the package "tests", as upstream runs it.
    const auto copy = rdmakit::testing::run({"sh", "-c",
                                             std::string("cp -r ") + kShippedSuite + " '" + dir_ +
                                                 "/tests' && gunzip -f '" + dir_ + "'/tests/*.gz"},
                                            60s);
    ASSERT_TRUE(copy.ok()) << copy.describe();
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string dir_;
};

TEST_F(RdmaCoreSuite, RunsWithoutFailuresOrErrors) {
  const auto suite = rdmakit::testing::run(
      {SOFTRDMA_RUN, kPython, dir_ + "/tests/run_tests.py", "--dev", "softrdma0", "-v"}, 600s);
  ASSERT_FALSE(suite.timed_out) << suite.output.substr(
      suite.output.size() > 4000 ? suite.output.size() - 4000 : 0);
  const SuiteResult r = parse(suite.output);
  std::cout << "rdma-core suite on softrdma: " << r.passed << " passed, " << r.failed << " failed, "
            << r.errors << " errors, " << r.skipped << " skipped\n";
  for (const auto& [reason, count] : r.skip_reasons)
    std::cout << "  skipped " << count << "x: " << reason << "\n";
  RecordProperty("passed", r.passed);
  RecordProperty("skipped", r.skipped);
  EXPECT_GT(r.passed, 0) << suite.output;
  for (const char* name : kMustPass) {
    const auto v = r.verdicts.find(name);
    EXPECT_TRUE(v != r.verdicts.end() && v->second == "ok")
        << name << ": " << (v == r.verdicts.end() ? "not run" : v->second);
  }
  EXPECT_EQ(r.failed, 0) << suite.output;
  EXPECT_EQ(r.errors, 0) << suite.output;
  EXPECT_TRUE(suite.ok()) << suite.describe();
}

}  // namespace

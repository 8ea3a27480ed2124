// Every binary of ibverbs-utils, rdmacm-utils and perftest starts on softrdma's libraries:
// they are linked BIND_NOW, so one missing symbol@version kills them before main().
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "support/subprocess.hpp"

using namespace std::chrono_literals;

namespace {

std::vector<std::string> package_binaries(const std::string& package) {
  std::vector<std::string> out;
  const std::string cmd = "dpkg -L " + package + " 2>/dev/null | grep '^/usr/bin/'";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, p)) {
      std::string s(line);
      while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
      out.push_back(s);
    }
    pclose(p);
  }
  return out;
}

bool loader_failed(const std::string& output) {
  for (const char* marker : {"symbol lookup error", "error while loading shared libraries",
                             "not found (required by", "undefined symbol"})
    if (output.find(marker) != std::string::npos) return true;
  return false;
}

class Loader : public ::testing::TestWithParam<std::string> {};

TEST_P(Loader, EveryBinaryStarts) {
  const auto binaries = package_binaries(GetParam());
  ASSERT_FALSE(binaries.empty()) << GetParam() << " is not installed";
  for (const std::string& bin : binaries) {
    // --help makes most of them print usage and exit; the rest are stopped by the limit.
    auto e = rdmakit::testing::run({SOFTRDMA_RUN, bin, "--help"}, 5s);
    EXPECT_FALSE(loader_failed(e.output)) << bin << ": " << e.describe();
    EXPECT_NE(e.signal, SIGSEGV) << bin << " crashed: " << e.describe();
  }
}

std::string package_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Packages, Loader,
                         ::testing::Values("ibverbs-utils", "rdmacm-utils", "perftest"),
                         package_test_name);

TEST(Loader, ProviderLibrariesLoadBesideSoftrdma) {
  // perftest has DT_NEEDED on the system libmlx5/libefa, which import IBVERBS_PRIVATE_<N>.
  auto e = rdmakit::testing::run({SOFTRDMA_RUN, "ib_write_bw", "--version"}, 5s);
  EXPECT_FALSE(loader_failed(e.output)) << e.describe();
  // perftest prints its version from main() (and exits 1): main() was reached.
  EXPECT_NE(e.output.find("Version:"), std::string::npos) << e.describe();
}

TEST(Loader, DevicesListsSoftrdma0) {
  auto e = rdmakit::testing::run({SOFTRDMA_RUN, "ibv_devices"}, 5s);
  ASSERT_TRUE(e.ok()) << e.describe();
  EXPECT_NE(e.output.find("softrdma0"), std::string::npos) << e.output;
}

TEST(Loader, DevinfoShowsAttributesAndGids) {
  auto e = rdmakit::testing::run({SOFTRDMA_RUN, "ibv_devinfo", "-v"}, 5s);
  ASSERT_TRUE(e.ok()) << e.describe();
  for (const char* expected : {"hca_id:\tsoftrdma0", "PORT_ACTIVE", "link_layer:\t\tEthernet",
                               "active_mtu:\t\t4096", "ATOMIC_HCA", "::ffff:127.0.0.1, RoCE v2"})
    EXPECT_NE(e.output.find(expected), std::string::npos) << "missing " << expected;
}

}  // namespace

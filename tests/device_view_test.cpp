// softrdma-run shows softrdma0 where programs look for an RDMA device: /sys/class/infiniband
// (node, port, GIDs with their types and network interfaces), /sys/class/infiniband_verbs
// and /dev/infiniband, in a mount namespace of the program's own, so that nothing changes
// for other programs; without root through a user namespace.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "support/other_user.hpp"
#include "support/subprocess.hpp"
#include "support/two_hosts.hpp"

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

namespace {

constexpr const char* kSysfs = "/sys/class/infiniband/softrdma0";

rdmakit::testing::Exit under_softrdma(const std::string& script,
                                      std::vector<std::string> prefix = {},
                                      const std::vector<std::string>& env = {}) {
  prefix.insert(prefix.end(), {SOFTRDMA_RUN, "sh", "-c", script});
  return rdmakit::testing::run(prefix, 30s, env);
}

// "0000:0000:0000:0000:0000:ffff:c000:0202" -> "192.0.2.2" (the GIDs are IPv4-mapped).
std::string ipv4_of_gid(const std::string& gid) {
  static const std::string kMappedPrefix = "0000:0000:0000:0000:0000:ffff:";
  unsigned hi = 0, lo = 0;
  if (gid.size() != 39 || gid.compare(0, kMappedPrefix.size(), kMappedPrefix) != 0 ||
      std::sscanf(gid.c_str() + kMappedPrefix.size(), "%x:%x", &hi, &lo) != 2)
    return "";
  std::ostringstream s;
  s << (hi >> 8) << '.' << (hi & 0xff) << '.' << (lo >> 8) << '.' << (lo & 0xff);
  return s.str();
}

// For every GID with a type: "<index> <gid> <type> <ndev>", then "addr <ifname> <ipv4>" lines
// from `ip`, then "net <ifname>" for each entry of device/net, as the program sees them.
constexpr const char* kDescribeGids = R"sh(
cd /sys/class/infiniband/softrdma0/ports/1 || exit 1
for t in gid_attrs/types/*; do
  i=${t##*/}
  echo "gid $i $(cat gids/$i) $(cat $t | tr ' ' _) $(cat gid_attrs/ndevs/$i)"
done
ip -o -4 addr show | awk '{ split($4, a, "/"); print "addr", $2, a[1] }'
for n in /sys/class/infiniband/softrdma0/device/net/*; do echo "net ${n##*/}"; done
)sh";

struct GidRow {
  std::string gid, type, ndev;
};

void expect_gids_match_interfaces(const std::string& output) {
  std::map<std::string, std::string> interface_of_address;
  std::vector<GidRow> gids;
  std::vector<std::string> nets;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream w(line);
    std::string kind;
    w >> kind;
    if (kind == "gid") {
      std::string index;
      GidRow g;
      w >> index >> g.gid >> g.type >> g.ndev;
      gids.push_back(g);
    } else if (kind == "addr") {
      std::string ifname, address;
      w >> ifname >> address;
      interface_of_address[address] = ifname;
    } else if (kind == "net") {
      std::string ifname;
      w >> ifname;
      nets.push_back(ifname);
    }
  }
  ASSERT_FALSE(gids.empty()) << output;
  for (const GidRow& g : gids) {
    EXPECT_EQ(g.type, "RoCE_v2") << output;
    const std::string address = ipv4_of_gid(g.gid);
    ASSERT_TRUE(interface_of_address.count(address)) << g.gid << " is no address here\n" << output;
    EXPECT_EQ(g.ndev, interface_of_address[address]) << output;
    EXPECT_THAT(nets, ::testing::Contains(g.ndev)) << output;
  }
}

TEST(DeviceView, GidsTypesAndInterfacesAreThoseOfThisHost) {
  const auto e = under_softrdma(kDescribeGids);
  ASSERT_TRUE(e.ok()) << e.describe() << "\n" << e.output;
  expect_gids_match_interfaces(e.output);
}

TEST(DeviceView, InANetworkNamespaceTheGidsAreThoseOfItsInterfaces) {
  rdmakit::testing::TwoHosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "no network namespaces here: " << hosts.reason();
  const auto e = under_softrdma(kDescribeGids, hosts.on(1));
  ASSERT_TRUE(e.ok()) << e.describe() << "\n" << e.output;
  expect_gids_match_interfaces(e.output);
  EXPECT_THAT(e.output, HasSubstr(hosts.address(1)));
}

TEST(DeviceView, NodeAndPortAgreeWithWhatVerbsReport) {
  const auto sysfs = under_softrdma(
      "cd /sys/class/infiniband/softrdma0 && cat node_guid node_type fw_ver ports/1/state "
      "ports/1/link_layer ports/1/rate && cat /sys/class/infiniband_verbs/uverbs0/ibdev");
  ASSERT_TRUE(sysfs.ok()) << sysfs.describe() << "\n" << sysfs.output;
  const auto devinfo = rdmakit::testing::run({SOFTRDMA_RUN, "ibv_devinfo", "-v"}, 30s);
  ASSERT_TRUE(devinfo.ok()) << devinfo.describe();
  std::istringstream lines(sysfs.output);
  std::string guid, node_type, fw, state, link_layer, rate, ibdev;
  std::getline(lines, guid);
  std::getline(lines, node_type);
  std::getline(lines, fw);
  std::getline(lines, state);
  std::getline(lines, link_layer);
  std::getline(lines, rate);
  std::getline(lines, ibdev);
  EXPECT_THAT(devinfo.output, HasSubstr("node_guid:\t\t\t" + guid));
  EXPECT_EQ(node_type, "1: CA");
  EXPECT_THAT(devinfo.output, HasSubstr("fw_ver:\t\t\t\t" + fw));
  EXPECT_EQ(state, "4: ACTIVE");
  EXPECT_THAT(devinfo.output, HasSubstr("PORT_ACTIVE (4)"));
  EXPECT_EQ(link_layer, "Ethernet");
  EXPECT_THAT(devinfo.output, HasSubstr("link_layer:\t\tEthernet"));
  EXPECT_EQ(rate, "100 Gb/sec (4X EDR)");
  EXPECT_EQ(ibdev, "softrdma0");
}

// The port's hw_counters are the device's counters, live: every one of them there, as a
// number, and owner-only (the counts are the user's).
TEST(DeviceView, HwCountersHoldTheDevicesCounters) {
  const auto counters = under_softrdma(
      "cd /sys/class/infiniband/softrdma0/ports/1/hw_counters && for f in foreign_requests "
      "out_of_sequence duplicate_request bad_hellos resp_remote_access_errors peers_refused; "
      "do printf '%s ' $f; cat $f; done && stat -L -c %a .");
  ASSERT_TRUE(counters.ok()) << counters.describe() << "\n" << counters.output;
  EXPECT_THAT(counters.output, ::testing::ContainsRegex("foreign_requests [0-9]+\n"));
  EXPECT_THAT(counters.output, ::testing::ContainsRegex("peers_refused [0-9]+\n"));
  EXPECT_THAT(counters.output, ::testing::EndsWith("700\n"));
}

TEST(DeviceView, DeviceNodesAreCharacterDevicesTheProgramMayOpen) {
  const auto e = under_softrdma(
      "for n in /dev/infiniband/uverbs0 /dev/infiniband/rdma_cm; do "
      "[ -c $n ] && [ -r $n ] && [ -w $n ] && echo \"$n usable\"; done");
  ASSERT_TRUE(e.ok()) << e.describe();
  EXPECT_THAT(e.output, HasSubstr("/dev/infiniband/uverbs0 usable"));
  EXPECT_THAT(e.output, HasSubstr("/dev/infiniband/rdma_cm usable"));
}

// The rest of /dev and /sys/class is the host's own: same entries, the same files behind them.
TEST(DeviceView, EverythingElseInDevAndSysClassIsTheHostsOwn) {
  const auto listing = [](const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    std::string joined;
    for (const auto& n : names)
      if (n != "infiniband" && n != "infiniband_verbs") joined += n + "\n";
    return joined;
  };
  const std::string marker = "/dev/shm/softrdma-view-test-" + std::to_string(getpid());
  const auto e = under_softrdma(
      "ls -A /dev | grep -vx infiniband; echo ---; ls -A /sys/class | "
      "grep -vx 'infiniband\\|infiniband_verbs'; echo ---; echo "
      "written-inside > " +
      marker);
  ASSERT_TRUE(e.ok()) << e.describe() << "\n" << e.output;
  EXPECT_EQ(e.output, listing("/dev") + "---\n" + listing("/sys/class") + "---\n");
  std::ifstream written(marker);
  std::string text;
  std::getline(written, text);
  EXPECT_EQ(text, "written-inside") << "/dev/shm inside is not the host's";
  fs::remove(marker);
}

TEST(DeviceView, OtherProgramsSeeNothingChanged) {
  const bool had_sysfs = fs::exists(kSysfs);
  // The launcher stages the view in $TMPDIR: one of this test's own, so that other tests
  // starting programs meanwhile do not show up in it.
  char tmpdir[] = "/tmp/device-view-test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpdir), nullptr);
  const auto e =
      under_softrdma(std::string("test -d ") + kSysfs, {}, {std::string("TMPDIR=") + tmpdir});
  ASSERT_TRUE(e.ok()) << e.describe() << "\n" << e.output;
  EXPECT_EQ(fs::exists(kSysfs), had_sysfs);
  for (const auto& entry : fs::directory_iterator(tmpdir))
    ADD_FAILURE() << "left behind: " << entry.path();
  fs::remove_all(tmpdir);
  // That directory was the one used: without it there is nowhere to stage the view.
  const auto nowhere = under_softrdma("true", {}, {std::string("TMPDIR=") + tmpdir});
  EXPECT_THAT(nowhere.output, HasSubstr("mkdtemp"));
}

TEST(DeviceView, SoftrdmaDeviceViewZeroLeavesItOut) {
  const auto e = under_softrdma(std::string("test -e ") + kSysfs + " && echo shown || echo absent",
                                {}, {"SOFTRDMA_DEVICE_VIEW=0"});
  ASSERT_TRUE(e.ok()) << e.describe();
  EXPECT_THAT(e.output, HasSubstr(fs::exists(kSysfs) ? "shown" : "absent"));
}

// A user without the right to mount gets the view through a user namespace of its own and
// keeps its uid. The launcher and libraries are copied where that user may run them.
TEST(DeviceView, WithoutRootTheProgramKeepsItsUidAndSeesTheDevice) {
  rdmakit::testing::OtherUser nobody;
  if (!nobody.ok()) GTEST_SKIP() << nobody.reason();
  std::vector<std::string> unshare = nobody.as_user();
  unshare.insert(unshare.end(), {"unshare", "-U", "true"});
  const auto userns = rdmakit::testing::run(unshare, 10s);
  if (!userns.ok()) GTEST_SKIP() << "user namespaces are not allowed here: " << userns.output;
  std::vector<std::string> argv = nobody.softrdma_run();
  argv.insert(argv.end(), {"sh", "-c",
                           std::string("id -u; cat ") + kSysfs +
                               "/node_type; [ -c /dev/infiniband/uverbs0 ] && echo node; "
                               "ibv_devices"});
  const auto e = rdmakit::testing::run(argv, 30s, nobody.env());
  ASSERT_TRUE(e.ok()) << e.describe() << "\n" << e.output;
  EXPECT_THAT(e.output,
              HasSubstr(std::string(rdmakit::testing::OtherUser::kUid) + "\n1: CA\nnode\n"));
  EXPECT_THAT(e.output, HasSubstr("softrdma0"));
  EXPECT_THAT(e.output, Not(HasSubstr("is not shown")));
}

}  // namespace

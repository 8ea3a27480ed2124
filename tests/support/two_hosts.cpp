#include "support/two_hosts.hpp"

#include <unistd.h>

#include "support/subprocess.hpp"

using namespace std::chrono_literals;

namespace rdmakit::testing {
namespace {
bool sh(const std::vector<std::string>& argv, std::string* why) {
  auto e = run(argv, 10s);
  if (!e.ok() && why) *why = argv[0] + " " + argv[1] + " ...: " + e.describe();
  return e.ok();
}
}  // namespace

TwoHosts::TwoHosts() {
  if (geteuid() != 0) {
    reason_ = "network namespaces need root";
    return;
  }
  const std::string tag = std::to_string(getpid());
  ns_[0] = "rdmakit-a-" + tag;
  ns_[1] = "rdmakit-b-" + tag;
  const std::string va = "rka" + tag, vb = "rkb" + tag;  // interface names: <= 15 chars
  ok_ = sh({"ip", "netns", "add", ns_[0]}, &reason_) &&
        sh({"ip", "netns", "add", ns_[1]}, &reason_) &&
        sh({"ip", "link", "add", va, "type", "veth", "peer", "name", vb}, &reason_) &&
        sh({"ip", "link", "set", va, "netns", ns_[0]}, &reason_) &&
        sh({"ip", "link", "set", vb, "netns", ns_[1]}, &reason_);
  dev_[0] = va;
  dev_[1] = vb;
  for (int h = 0; ok_ && h < 2; ++h) {
    const std::string& dev = dev_[h];
    ok_ = sh({"ip", "-n", ns_[h], "addr", "add", address(h) + "/24", "dev", dev}, &reason_) &&
          sh({"ip", "-n", ns_[h], "link", "set", dev, "up"}, &reason_) &&
          sh({"ip", "-n", ns_[h], "link", "set", "lo", "up"}, &reason_);
  }
}

TwoHosts::~TwoHosts() {
  for (const std::string& ns : ns_)
    if (!ns.empty()) run({"ip", "netns", "delete", ns}, 10s);  // removes the veth pair too
}

std::vector<std::string> TwoHosts::on(int host) const {
  return {"ip", "netns", "exec", ns_[host]};
}

bool TwoHosts::impair(const std::string& qdisc) {
  for (int h = 0; h < 2; ++h) {
    std::vector<std::string> argv = {"ip",    "netns", "exec", ns_[h],  "tc",
                                     "qdisc", "add",   "dev",  dev_[h], "root"};
    for (const std::string& w : words(qdisc)) argv.push_back(w);
    if (!sh(argv, &reason_)) return false;
  }
  return true;
}

std::string TwoHosts::address(int host) const {
  return host == 0 ? "198.51.100.1" : "198.51.100.2";
}

}  // namespace rdmakit::testing

#include "support/switched_hosts.hpp"

#include <unistd.h>

#include "support/subprocess.hpp"

using namespace std::chrono_literals;

namespace rdmakit::testing {

SwitchedHosts::SwitchedHosts(int count) {
  if (geteuid() != 0) {
    reason_ = "network namespaces need root";
    return;
  }
  const std::string tag = std::to_string(getpid());
  const auto sh = [this](const std::vector<std::string>& argv) {
    const Exit e = run(argv, 10s);
    if (!e.ok()) reason_ = argv[0] + " " + argv[1] + " " + argv[2] + " ...: " + e.describe();
    return e.ok();
  };
  switch_ = "rdmakit-sw-" + tag;
  ok_ = sh({"ip", "netns", "add", switch_}) &&
        sh({"ip", "-n", switch_, "link", "add", "br0", "type", "bridge"}) &&
        sh({"ip", "-n", switch_, "link", "set", "br0", "up"});
  for (int h = 0; ok_ && h < count; ++h) {
    const std::string ns = "rdmakit-h" + std::to_string(h) + "-" + tag;
    // Interface names: at most 15 characters.
    const std::string here = "rkh" + std::to_string(h) + "-" + tag,
                      there = "rks" + std::to_string(h) + "-" + tag;
    ok_ = sh({"ip", "netns", "add", ns});
    if (ok_) hosts_.push_back(ns);
    ok_ = ok_ && sh({"ip", "link", "add", here, "type", "veth", "peer", "name", there}) &&
          sh({"ip", "link", "set", here, "netns", ns}) &&
          sh({"ip", "link", "set", there, "netns", switch_}) &&
          sh({"ip", "-n", switch_, "link", "set", there, "master", "br0", "up"}) &&
          sh({"ip", "-n", ns, "addr", "add", address(h) + "/24", "dev", here}) &&
          sh({"ip", "-n", ns, "link", "set", here, "up"}) &&
          sh({"ip", "-n", ns, "link", "set", "lo", "up"});
  }
}

SwitchedHosts::~SwitchedHosts() {
  // Deleting a namespace removes its end of each veth pair, and so the pair.
  for (const std::string& ns : hosts_) run({"ip", "netns", "delete", ns}, 10s);
  if (!switch_.empty()) run({"ip", "netns", "delete", switch_}, 10s);
}

std::vector<std::string> SwitchedHosts::on(int host) const {
  return {"ip", "netns", "exec", hosts_.at(static_cast<size_t>(host))};
}

std::string SwitchedHosts::address(int host) const {
  return "203.0.113." + std::to_string(host + 1);
}

}  // namespace rdmakit::testing

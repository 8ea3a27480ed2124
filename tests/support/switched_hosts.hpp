// Several "hosts" on this machine: network namespaces, each joined by a veth pair to a bridge
// in a namespace of its own (a switch), with addresses from TEST-NET-3 (203.0.113.0/24).
// Created and removed by the test itself (needs root). TwoHosts (two_hosts.hpp) joins two
// directly; this is for tests that need a third party on the same network.
#pragma once

#include <string>
#include <vector>

namespace rdmakit::testing {

class SwitchedHosts {
 public:
  explicit SwitchedHosts(int count);  // check ok() afterwards; reason() says why not
  ~SwitchedHosts();
  SwitchedHosts(const SwitchedHosts&) = delete;
  SwitchedHosts& operator=(const SwitchedHosts&) = delete;

  bool ok() const { return ok_; }
  const std::string& reason() const { return reason_; }
  /// argv prefix that runs a command on host `host`.
  std::vector<std::string> on(int host) const;
  /// The IPv4 address of host `host`.
  std::string address(int host) const;

 private:
  std::string switch_;
  std::vector<std::string> hosts_;
  bool ok_ = false;
  std::string reason_;
};

}  // namespace rdmakit::testing

// Two "hosts" on this machine: network namespaces joined by a veth pair, with addresses
// from TEST-NET-2 (198.51.100.0/24). Created and removed by the test itself (needs root).
#pragma once

#include <string>
#include <vector>

namespace rdmakit::testing {

class TwoHosts {
 public:
  TwoHosts();  // check ok() afterwards; reason() says why not
  ~TwoHosts();
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;

  bool ok() const { return ok_; }
  const std::string& reason() const { return reason_; }
  /// The network namespace of host 0 or 1.
  const std::string& name(int host) const { return ns_[host]; }
  /// argv prefix that runs a command on host 0 or 1.
  std::vector<std::string> on(int host) const;
  /// The IPv4 address of host 0 or 1.
  std::string address(int host) const;
  /// Impairs both ends of the link with `tc qdisc add ... root <qdisc>` (e.g. "netem loss
  /// 5% delay 20ms": each direction then loses and delays; "tbf rate 40mbit ...": each
  /// direction is that slow). False with reason() if tc fails (the kernel may lack it).
  bool impair(const std::string& qdisc);

 private:
  std::string ns_[2];
  std::string dev_[2];
  bool ok_ = false;
  std::string reason_;
};

}  // namespace rdmakit::testing

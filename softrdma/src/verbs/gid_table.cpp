#include "verbs/gid_table.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <algorithm>
#include <cstring>

namespace softrdma {

Gid GidTable::from_ipv4(uint32_t addr_be) {
  Gid g{};
  g[10] = 0xff;
  g[11] = 0xff;
  std::memcpy(&g[12], &addr_be, 4);
  return g;
}

bool GidTable::is_ipv4_mapped(const Gid& gid) {
  static constexpr uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.data(), prefix, sizeof prefix) == 0;
}

uint32_t GidTable::ipv4_of(const Gid& gid) {
  uint32_t a;
  std::memcpy(&a, &gid[12], 4);
  return a;
}

GidTable GidTable::from_host() {
  GidTable t;
  std::vector<Entry> loopback;
  const auto known = [&](const Gid& g) {
    return t.contains(g) || std::any_of(loopback.begin(), loopback.end(),
                                        [&](const Entry& e) { return e.gid == g; });
  };
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      const uint32_t a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      const Gid g = from_ipv4(a);
      if (known(g)) continue;
      ((ntohl(a) >> 24) == 127 ? loopback : t.entries_).push_back({g, if_nametoindex(i->ifa_name)});
    }
    freeifaddrs(list);
  }
  // Without any interface the device still needs a GID for loopback traffic.
  if (loopback.empty())
    loopback.push_back({from_ipv4(htonl(INADDR_LOOPBACK)), if_nametoindex("lo")});
  t.entries_.insert(t.entries_.end(), loopback.begin(), loopback.end());
  if (t.entries_.size() > kLength - 1) t.entries_.resize(kLength - 1);  // keep one empty entry
  return t;
}

Gid GidTable::at(uint32_t index) const {
  return index < entries_.size() ? entries_[index].gid : Gid{};
}

uint32_t GidTable::interface_of(uint32_t index) const {
  return index < entries_.size() ? entries_[index].ifindex : 0;
}

bool GidTable::contains(const Gid& gid) const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const Entry& e) { return e.gid == gid; });
}

}  // namespace softrdma

#include "verbs/gid_table.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
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
  std::vector<Gid> loopback;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      const uint32_t a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      Gid g = from_ipv4(a);
      if (t.contains(g) || std::find(loopback.begin(), loopback.end(), g) != loopback.end())
        continue;
      ((ntohl(a) >> 24) == 127 ? loopback : t.gids_).push_back(g);
    }
    freeifaddrs(list);
  }
  // Without any interface the device still needs a GID for loopback traffic.
  if (loopback.empty()) loopback.push_back(from_ipv4(htonl(INADDR_LOOPBACK)));
  t.gids_.insert(t.gids_.end(), loopback.begin(), loopback.end());
  if (t.gids_.size() > kLength - 1) t.gids_.resize(kLength - 1);  // keep one empty entry
  return t;
}

Gid GidTable::at(uint32_t index) const {
  return index < gids_.size() ? gids_[index] : Gid{};
}

bool GidTable::contains(const Gid& gid) const {
  return std::find(gids_.begin(), gids_.end(), gid) != gids_.end();
}

}  // namespace softrdma

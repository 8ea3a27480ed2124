// The port's GID table: one RoCE v2 GID per IPv4 address of this host (of its network
// namespace), routable addresses first and loopback last, as perftest and pyverbs take
// the first suitable entry.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace softrdma {

using Gid = std::array<uint8_t, 16>;

class GidTable {
 public:
  static constexpr uint32_t kLength = 16;  // entries past the populated ones read as zero

  /// Reads the host's addresses now.
  static GidTable from_host();

  uint32_t populated() const { return static_cast<uint32_t>(entries_.size()); }
  /// The GID at `index`, or the zero GID for an empty entry.
  Gid at(uint32_t index) const;
  /// The index of the network interface that carries the GID at `index` (0 for an empty entry).
  uint32_t interface_of(uint32_t index) const;
  bool contains(const Gid& gid) const;

  /// ::ffff:a.b.c.d for an IPv4 address given in network byte order.
  static Gid from_ipv4(uint32_t addr_be);
  static bool is_ipv4_mapped(const Gid& gid);
  static uint32_t ipv4_of(const Gid& gid);  // network byte order

 private:
  struct Entry {
    Gid gid;
    uint32_t ifindex;
  };
  std::vector<Entry> entries_;
};

}  // namespace softrdma

// Devices, ports and GIDs: what is there and which GID a connection should use.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rdmakit {

enum class GidType { ib, roce_v1, roce_v2 };
const char* to_string(GidType type) noexcept;

struct GidEntry {
  int index = -1;
  ibv_gid gid{};
  GidType type = GidType::ib;

  /// ::ffff:a.b.c.d (RoCE over IPv4).
  bool ipv4_mapped() const noexcept;
  /// fe80::/10 (derived from a MAC address, not routable).
  bool link_local() const noexcept;
  /// The IPv4 address in host byte order; only meaningful when ipv4_mapped().
  uint32_t ipv4() const noexcept;
  /// "a.b.c.d" for IPv4-mapped GIDs, else the IPv6 notation.
  std::string address() const;
};

struct PortInfo {
  uint8_t number = 0;
  ibv_port_state state = IBV_PORT_NOP;
  uint8_t link_layer = IBV_LINK_LAYER_UNSPECIFIED;
  ibv_mtu active_mtu = IBV_MTU_1024;
  uint16_t lid = 0;
  std::vector<GidEntry> gids;  ///< non-empty entries only
};

struct DeviceInfo {
  std::string name;
  uint64_t node_guid = 0;  ///< network byte order, as the device reports it
  uint32_t vendor_id = 0;
  uint32_t vendor_part_id = 0;
  int max_qp = 0, max_qp_wr = 0, max_sge = 0, max_cqe = 0, max_mr = 0, max_qp_rd_atom = 0;
  uint64_t max_mr_size = 0;
  ibv_atomic_cap atomic_cap = IBV_ATOMIC_NONE;
  std::vector<PortInfo> ports;
};

/// Every RDMA device with its ports and GID tables. Throws Error if the verbs library fails.
std::vector<DeviceInfo> list_devices();
PortInfo query_port(ibv_context* context, uint8_t port);

/// The GID a connection uses, and why it was chosen.
struct GidChoice {
  GidEntry entry;
  /// One line, e.g. "softrdma0 port 1 GID 0 (RoCE v2, 10.0.0.5): first RoCE v2 IPv4 entry;
  /// skipped 1 link-local".
  std::string summary;
};

/// Chooses a GID of `port`: `override_index` (or RDMAKIT_GID_INDEX) if given, else the first
/// RoCE v2 entry with an IPv4-mapped address, else the first RoCE v2 one, else the first entry
/// that is neither link-local nor empty. Throws Error if the port has no usable GID or the
/// override names an empty entry.
GidChoice select_gid(ibv_context* context, uint8_t port,
                     std::optional<int> override_index = std::nullopt);

}  // namespace rdmakit

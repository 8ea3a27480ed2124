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

/// One entry of a port's GID table.
struct GidEntry {
  /// Position in the table (the GID index verbs calls take).
  int index = -1;
  /// The GID itself.
  ibv_gid gid{};
  /// InfiniBand, RoCE v1 or RoCE v2.
  GidType type = GidType::ib;

  /// \::ffff:a.b.c.d (RoCE over IPv4).
  bool ipv4_mapped() const noexcept;
  /// fe80::/10 (derived from a MAC address, not routable).
  bool link_local() const noexcept;
  /// The IPv4 address in host byte order; only meaningful when ipv4_mapped().
  uint32_t ipv4() const noexcept;
  /// "a.b.c.d" for IPv4-mapped GIDs, else the IPv6 notation.
  std::string address() const;
};

/// A port of a device: its state, link layer, MTU and GID table.
struct PortInfo {
  /// Port number (from 1).
  uint8_t number = 0;
  /// IBV_PORT_ACTIVE when it can carry traffic.
  ibv_port_state state = IBV_PORT_NOP;
  /// IBV_LINK_LAYER_ETHERNET (RoCE) or IBV_LINK_LAYER_INFINIBAND.
  uint8_t link_layer = IBV_LINK_LAYER_UNSPECIFIED;
  /// The MTU the port runs at.
  ibv_mtu active_mtu = IBV_MTU_1024;
  /// The port's LID (InfiniBand; 0 on RoCE).
  uint16_t lid = 0;
  std::vector<GidEntry> gids;  ///< non-empty entries only
};

/// An RDMA device as list_devices() reports it: identity, limits and ports.
struct DeviceInfo {
  /// Device name, e.g. "mlx5_0" or "softrdma0".
  std::string name;
  uint64_t node_guid = 0;  ///< network byte order, as the device reports it
  /// IEEE OUI of the vendor.
  uint32_t vendor_id = 0;
  /// The vendor's part number.
  uint32_t vendor_part_id = 0;
  int max_qp = 0;          ///< QPs (limits from ibv_query_device())
  int max_qp_wr = 0;       ///< work requests per queue
  int max_sge = 0;         ///< scatter/gather entries per work request
  int max_cqe = 0;         ///< entries per CQ
  int max_mr = 0;          ///< memory regions
  int max_qp_rd_atom = 0;  ///< READs/atomics outstanding per QP
  /// Largest memory region, in bytes.
  uint64_t max_mr_size = 0;
  /// How atomic operations are atomic (none, within the device, globally).
  ibv_atomic_cap atomic_cap = IBV_ATOMIC_NONE;
  /// Its ports, in order.
  std::vector<PortInfo> ports;
};

/// Every RDMA device with its ports and GID tables. Throws Error if the verbs library fails.
std::vector<DeviceInfo> list_devices();
PortInfo query_port(ibv_context* context, uint8_t port);

/// The GID a connection uses, and why it was chosen.
struct GidChoice {
  /// The chosen GID.
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

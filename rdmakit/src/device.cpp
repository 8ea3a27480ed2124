#include "rdmakit/device.hpp"

#include <arpa/inet.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "device_list.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit {
namespace {

struct ContextCloser {
  void operator()(ibv_context* c) const { ibv_close_device(c); }
};

bool empty_gid(const ibv_gid& gid) {
  static constexpr ibv_gid zero{};
  return std::memcmp(&gid, &zero, sizeof gid) == 0;
}

GidType type_of(const ibv_gid_entry& entry) {
  switch (entry.gid_type) {
    case IBV_GID_TYPE_ROCE_V1:
      return GidType::roce_v1;
    case IBV_GID_TYPE_ROCE_V2:
      return GidType::roce_v2;
    default:
      return GidType::ib;
  }
}

DeviceInfo describe(ibv_device* device) {
  std::unique_ptr<ibv_context, ContextCloser> ctx(ibv_open_device(device));
  if (!ctx) throw_verbs_error("ibv_open_device", errno, ibv_get_device_name(device));
  ibv_device_attr attr{};
  if (int err = ibv_query_device(ctx.get(), &attr))
    throw_verbs_error("ibv_query_device", err, ibv_get_device_name(device));
  DeviceInfo info;
  info.name = ibv_get_device_name(device);
  info.node_guid = attr.node_guid;
  info.vendor_id = attr.vendor_id;
  info.vendor_part_id = attr.vendor_part_id;
  info.max_qp = attr.max_qp;
  info.max_qp_wr = attr.max_qp_wr;
  info.max_sge = attr.max_sge;
  info.max_cqe = attr.max_cqe;
  info.max_mr = attr.max_mr;
  info.max_qp_rd_atom = attr.max_qp_rd_atom;
  info.max_mr_size = attr.max_mr_size;
  info.atomic_cap = attr.atomic_cap;
  for (uint8_t port = 1; port <= attr.phys_port_cnt; ++port)
    info.ports.push_back(query_port(ctx.get(), port));
  return info;
}

std::string port_name(ibv_context* context, uint8_t port) {
  return std::string(ibv_get_device_name(context->device)) + " port " + std::to_string(port);
}

}  // namespace

const char* to_string(GidType type) noexcept {
  switch (type) {
    case GidType::ib:
      return "IB/RoCE v1";
    case GidType::roce_v1:
      return "RoCE v1";
    case GidType::roce_v2:
      return "RoCE v2";
  }
  return "?";
}

bool GidEntry::ipv4_mapped() const noexcept {
  static constexpr uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, prefix, sizeof prefix) == 0;
}

bool GidEntry::link_local() const noexcept {
  return gid.raw[0] == 0xfe && (gid.raw[1] & 0xc0) == 0x80;
}

uint32_t GidEntry::ipv4() const noexcept {
  uint32_t be;
  std::memcpy(&be, gid.raw + 12, sizeof be);
  return ntohl(be);
}

std::string GidEntry::address() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (ipv4_mapped())
    inet_ntop(AF_INET, gid.raw + 12, text, sizeof text);
  else
    inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  return text;
}

PortInfo query_port(ibv_context* context, uint8_t port) {
  ibv_port_attr attr{};
  if (int err = ibv_query_port(context, port, &attr))
    throw_verbs_error("ibv_query_port", err, port_name(context, port));
  PortInfo info;
  info.number = port;
  info.state = attr.state;
  info.link_layer = attr.link_layer;
  info.active_mtu = attr.active_mtu;
  info.lid = attr.lid;
  for (int i = 0; i < attr.gid_tbl_len; ++i) {
    ibv_gid_entry entry{};
    if (ibv_query_gid_ex(context, port, static_cast<uint32_t>(i), &entry, 0) != 0) continue;
    GidEntry gid{i, entry.gid, type_of(entry)};
    if (!empty_gid(gid.gid)) info.gids.push_back(gid);
  }
  return info;
}

std::vector<DeviceInfo> list_devices() {
  const detail::DeviceList list;
  std::vector<DeviceInfo> devices;
  for (ibv_device* device : list.devices()) devices.push_back(describe(device));
  return devices;
}

GidChoice select_gid(ibv_context* context, uint8_t port, std::optional<int> override_index) {
  if (!override_index) {
    if (const char* env = std::getenv("RDMAKIT_GID_INDEX"); env && *env)
      override_index = std::atoi(env);
  }
  const PortInfo info = query_port(context, port);
  const std::string where = port_name(context, port);
  auto describe_choice = [&](const GidEntry& e, const std::string& why) {
    return GidChoice{e, where + " GID " + std::to_string(e.index) + " (" + to_string(e.type) +
                            ", " + e.address() + "): " + why};
  };
  if (override_index) {
    for (const GidEntry& e : info.gids)
      if (e.index == *override_index) return describe_choice(e, "chosen by the caller");
    throw Error(verbs_error(ENOENT), where + ": GID index " + std::to_string(*override_index) +
                                         " is empty or out of range");
  }
  int link_local = 0;
  const GidEntry* v2 = nullptr;
  const GidEntry* other = nullptr;
  for (const GidEntry& e : info.gids) {
    if (e.link_local()) {
      ++link_local;
      continue;
    }
    if (e.type == GidType::roce_v2 && e.ipv4_mapped()) {
      std::string why = "first RoCE v2 entry with an IPv4 address";
      if (link_local) why += "; skipped " + std::to_string(link_local) + " link-local";
      return describe_choice(e, why);
    }
    if (e.type == GidType::roce_v2 && !v2) v2 = &e;
    if (!other) other = &e;
  }
  if (v2) return describe_choice(*v2, "first RoCE v2 entry (none has an IPv4 address)");
  if (other) return describe_choice(*other, "first entry that is not link-local (no RoCE v2)");
  throw Error(verbs_error(ENOENT), where + ": no usable GID (" + std::to_string(link_local) +
                                       " link-local, the rest empty)");
}

}  // namespace rdmakit

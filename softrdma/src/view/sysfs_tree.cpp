#include "view/sysfs_tree.hpp"

#include <endian.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

// The directory of the device's counter files (verbs/internal_api.cpp).
extern "C" int softrdma_counters_dir(char* out, size_t size);

namespace softrdma::view {
namespace {

struct Failure {
  std::string what;
};

void make_dirs(const std::string& path) {
  for (size_t at = 1; at != std::string::npos; at = path.find('/', at + 1)) {
    const std::string prefix = path.substr(0, at);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      throw Failure{"mkdir " + prefix + ": " + std::strerror(errno)};
  }
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    throw Failure{"mkdir " + path + ": " + std::strerror(errno)};
}

// Like a sysfs attribute: the value and a newline.
void write_attr(const std::string& dir, const std::string& name, const std::string& value) {
  make_dirs(dir);
  std::ofstream out(dir + "/" + name);
  out << value << '\n';
  if (!out) throw Failure{"write " + dir + "/" + name};
}

void link_to(const std::string& target, const std::string& link) {
  if (symlink(target.c_str(), link.c_str()) != 0 && errno != EEXIST)
    throw Failure{"symlink " + link + ": " + std::strerror(errno)};
}

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

// The kernel prints a GUID as four big-endian 16-bit groups.
std::string guid_text(__be64 guid) {
  const uint64_t g = be64toh(guid);
  return format("%04x:%04x:%04x:%04x", unsigned(g >> 48) & 0xffff, unsigned(g >> 32) & 0xffff,
                unsigned(g >> 16) & 0xffff, unsigned(g) & 0xffff);
}

std::string gid_text(const ibv_gid& gid) {
  std::string s;
  for (int i = 0; i < 16; i += 2) {
    if (i) s += ':';
    s += format("%02x%02x", gid.raw[i], gid.raw[i + 1]);
  }
  return s;
}

std::string state_text(ibv_port_state state) {
  static constexpr const char* kNames[] = {"NOP",   "DOWN",   "INIT",
                                           "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  const unsigned s = state;
  return format("%u: %s", s, s < std::size(kNames) ? kNames[s] : "UNKNOWN");
}

std::string phys_state_text(uint8_t state) {
  static constexpr const char* kNames[] = {
      "<unknown>",         "Sleep",   "Polling", "Disabled", "PortConfigurationTraining", "LinkUp",
      "LinkErrorRecovery", "Phy Test"};
  return format("%u: %s", unsigned(state), state < std::size(kNames) ? kNames[state] : "<unknown>");
}

// "100 Gb/sec (4X EDR)", from the width and speed codes of ibv_port_attr.
std::string rate_text(uint8_t width_code, uint32_t speed_code) {
  int lanes = 1;
  switch (width_code) {
    case 2:
      lanes = 4;
      break;
    case 4:
      lanes = 8;
      break;
    case 8:
      lanes = 12;
      break;
    case 16:
      lanes = 2;
      break;
    default:
      break;
  }
  struct Speed {
    uint32_t code;
    double gbps;
    const char* name;
  };
  static constexpr Speed kSpeeds[] = {{1, 2.5, "SDR"},  {2, 5, "DDR"},    {4, 10, "QDR"},
                                      {8, 10, "FDR10"}, {16, 14, "FDR"},  {32, 25, "EDR"},
                                      {64, 50, "HDR"},  {128, 100, "NDR"}};
  for (const Speed& s : kSpeeds)
    if (s.code == speed_code) return format("%g Gb/sec (%dX %s)", lanes * s.gbps, lanes, s.name);
  return format("%g Gb/sec (%dX)", lanes * 2.5, lanes);
}

void write_port(ibv_context* ctx, const std::string& port_dir, uint8_t port, std::string& net_dir) {
  ibv_port_attr p{};
  if (ibv_query_port(ctx, port, &p) != 0) throw Failure{"ibv_query_port"};
  write_attr(port_dir, "state", state_text(p.state));
  write_attr(port_dir, "phys_state", phys_state_text(p.phys_state));
  write_attr(port_dir, "link_layer",
             p.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
  write_attr(port_dir, "rate", rate_text(p.active_width, p.active_speed));
  write_attr(port_dir, "lid", format("0x%x", unsigned(p.lid)));
  write_attr(port_dir, "sm_lid", format("0x%x", unsigned(p.sm_lid)));
  write_attr(port_dir, "lid_mask_count", format("%u", unsigned(p.lmc)));
  write_attr(port_dir, "sm_sl", format("%u", unsigned(p.sm_sl)));
  write_attr(port_dir, "cap_mask", format("0x%08x", p.port_cap_flags));
  make_dirs(port_dir + "/gid_attrs/types");
  make_dirs(port_dir + "/gid_attrs/ndevs");
  for (int i = 0; i < p.gid_tbl_len; ++i) {
    ibv_gid gid{};
    if (ibv_query_gid(ctx, port, i, &gid) != 0) throw Failure{format("ibv_query_gid %d", i)};
    write_attr(port_dir + "/gids", std::to_string(i), gid_text(gid));
    // As in the kernel, an empty entry has no type and no interface (reading them fails).
    ibv_gid_entry entry{};
    if (ibv_query_gid_ex(ctx, port, static_cast<uint32_t>(i), &entry, 0) != 0) continue;
    write_attr(port_dir + "/gid_attrs/types", std::to_string(i),
               entry.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1");
    char ifname[IF_NAMESIZE] = {};
    if (entry.ndev_ifindex == 0 || !if_indextoname(entry.ndev_ifindex, ifname)) continue;
    write_attr(port_dir + "/gid_attrs/ndevs", std::to_string(i), ifname);
    // The device's network interfaces, as device/net/<name> of a RoCE NIC.
    link_to("/sys/class/net/" + std::string(ifname), net_dir + "/" + ifname);
  }
  // The counters, live: the library rewrites their files as it counts.
  char counters[512];
  if (softrdma_counters_dir(counters, sizeof counters) == 0)
    link_to(counters, port_dir + "/hw_counters");
}

void write_device(ibv_device* dev, const std::string& class_dir) {
  const std::string name = ibv_get_device_name(dev);
  std::unique_ptr<ibv_context, int (*)(ibv_context*)> ctx(ibv_open_device(dev), ibv_close_device);
  if (!ctx) throw Failure{"ibv_open_device " + name + ": " + std::strerror(errno)};
  ibv_device_attr a{};
  if (ibv_query_device(ctx.get(), &a) != 0) throw Failure{"ibv_query_device " + name};

  const std::string dir = class_dir + "/infiniband/" + name;
  write_attr(dir, "node_type", "1: CA");
  write_attr(dir, "node_guid", guid_text(a.node_guid));
  write_attr(dir, "sys_image_guid", guid_text(a.sys_image_guid));
  write_attr(dir, "fw_ver", a.fw_ver);
  write_attr(dir, "hw_rev", format("0x%x", a.hw_ver));
  write_attr(dir, "node_desc", name);
  // A software device has no bus device: its device/ holds only its network interfaces.
  std::string net_dir = dir + "/device/net";
  make_dirs(net_dir);
  for (uint8_t port = 1; port <= a.phys_port_cnt; ++port)
    write_port(ctx.get(), dir + "/ports/" + std::to_string(port), port, net_dir);

  const std::string uverbs = class_dir + "/infiniband_verbs/" + dev->dev_name;
  write_attr(uverbs, "ibdev", name);
  write_attr(uverbs, "abi_version", "1");
}

}  // namespace

std::string write_sysfs_tree(const std::string& class_dir) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list) return std::string("ibv_get_device_list: ") + std::strerror(errno);
  std::string failure;
  try {
    write_attr(class_dir + "/infiniband_verbs", "abi_version", "6");
    for (int i = 0; i < count; ++i) write_device(list[i], class_dir);
  } catch (const Failure& f) {
    failure = f.what;
  }
  ibv_free_device_list(list);
  return failure;
}

}  // namespace softrdma::view

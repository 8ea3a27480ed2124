#include "devices.hpp"

#include <arpa/inet.h>
#include <endian.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "rdmakit/context.hpp"
#include "rdmakit/device.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::tool {
namespace {

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

// The raw GID in IPv6 notation (GIDs are IPv6 addresses).
std::string raw_gid(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  return text;
}

const char* link_layer(uint8_t layer) {
  switch (layer) {
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    default:
      return "unspecified";
  }
}

// The library's choice on a port, or why there is none.
struct Choice {
  std::optional<GidChoice> gid;
  std::string problem;
};

// A port's hardware counters, where the kernel shows a NIC's (and softrdma-run softrdma0's):
// /sys/class/infiniband/<device>/ports/<port>/hw_counters/<name>. Empty when there are none.
std::map<std::string, uint64_t> hw_counters(const DeviceInfo& device, const PortInfo& port) {
  std::map<std::string, uint64_t> counters;
  const std::filesystem::path dir = std::filesystem::path("/sys/class/infiniband") / device.name /
                                    "ports" / std::to_string(port.number) / "hw_counters";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::ifstream file(entry.path());
    uint64_t value = 0;
    if (file >> value) counters[name] = value;
  }
  return counters;
}

Choice choose(const DeviceInfo& device, const PortInfo& port) {
  try {
    Context context = Context::open({device.name, port.number, std::nullopt});
    return {context.gid(), {}};
  } catch (const Error& e) {
    return {std::nullopt, e.what()};
  }
}

nlohmann::json port_json(const DeviceInfo& device, const PortInfo& port, bool verbose) {
  nlohmann::json gids = nlohmann::json::array();
  for (const GidEntry& g : port.gids)
    gids.push_back({{"index", g.index},
                    {"gid", raw_gid(g.gid)},
                    {"address", g.address()},
                    {"type", to_string(g.type)},
                    {"ipv4_mapped", g.ipv4_mapped()},
                    {"link_local", g.link_local()}});
  const Choice choice = choose(device, port);
  nlohmann::json chosen = nullptr;
  if (choice.gid)
    chosen = {{"index", choice.gid->entry.index}, {"summary", choice.gid->summary}};
  else
    chosen = {{"error", choice.problem}};
  nlohmann::json out = {{"number", port.number},
                        {"state", ibv_port_state_str(port.state)},
                        {"link_layer", link_layer(port.link_layer)},
                        {"active_mtu", 128 << static_cast<int>(port.active_mtu)},
                        {"lid", port.lid},
                        {"gids", gids},
                        {"chosen_gid", chosen}};
  if (verbose) out["hw_counters"] = hw_counters(device, port);
  return out;
}

void print_json(const std::vector<DeviceInfo>& devices, bool verbose) {
  nlohmann::json out = nlohmann::json::array();
  for (const DeviceInfo& d : devices) {
    nlohmann::json ports = nlohmann::json::array();
    for (const PortInfo& p : d.ports) ports.push_back(port_json(d, p, verbose));
    out.push_back({{"name", d.name},
                   {"node_guid", hex(be64toh(d.node_guid))},
                   {"vendor_id", d.vendor_id},
                   {"vendor_part_id", d.vendor_part_id},
                   {"max_qp", d.max_qp},
                   {"max_qp_wr", d.max_qp_wr},
                   {"max_cqe", d.max_cqe},
                   {"max_mr", d.max_mr},
                   {"max_mr_size", d.max_mr_size},
                   {"max_qp_rd_atom", d.max_qp_rd_atom},
                   {"atomics", d.atomic_cap != IBV_ATOMIC_NONE},
                   {"ports", ports}});
  }
  std::printf("%s\n", out.dump(2).c_str());
}

void print_text(const std::vector<DeviceInfo>& devices, bool verbose) {
  if (devices.empty()) std::printf("%s\n", kNoDeviceHint);
  for (const DeviceInfo& d : devices) {
    std::printf("%s: node GUID %s, vendor 0x%x part %u, max QPs %d, max QP WRs %d, atomics %s\n",
                d.name.c_str(), hex(be64toh(d.node_guid)).c_str(), d.vendor_id, d.vendor_part_id,
                d.max_qp, d.max_qp_wr, d.atomic_cap != IBV_ATOMIC_NONE ? "yes" : "no");
    for (const PortInfo& p : d.ports) {
      std::printf("  port %u: %s, %s, MTU %d, LID %u\n", p.number, ibv_port_state_str(p.state),
                  link_layer(p.link_layer), 128 << static_cast<int>(p.active_mtu), p.lid);
      for (const GidEntry& g : p.gids)
        std::printf("    GID %-3d %-40s %-16s %s%s\n", g.index, raw_gid(g.gid).c_str(),
                    g.address().c_str(), to_string(g.type), g.link_local() ? ", link-local" : "");
      const Choice choice = choose(d, p);
      if (choice.gid)
        std::printf("    chosen: %s\n", choice.gid->summary.c_str());
      else
        std::printf("    chosen: none (%s)\n", choice.problem.c_str());
      if (!verbose) continue;
      const auto counters = hw_counters(d, p);
      if (counters.empty()) std::printf("    counters: none shown (no hw_counters in sysfs)\n");
      for (const auto& [name, value] : counters)
        std::printf("    counter %-28s %llu\n", name.c_str(),
                    static_cast<unsigned long long>(value));
    }
  }
}

}  // namespace

void add_devices_options(CLI::App& devices, DevicesOptions& options) {
  devices.add_flag("--json", options.json, "print JSON instead of text");
  devices.add_flag("-v,--verbose", options.verbose,
                   "also print each port's hardware counters (sysfs hw_counters: a NIC's, or "
                   "softrdma0's under softrdma-run, such as the requests it refused)");
}

void run_devices(const DevicesOptions& options) {
  const std::vector<DeviceInfo> devices = list_devices();
  if (options.json)
    print_json(devices, options.verbose);
  else
    print_text(devices, options.verbose);
}

}  // namespace rdmakit::tool

// GID queries: the legacy, extended and table forms, and the GID type.
#include <cerrno>
#include <cstring>

#include "common/export.hpp"
#include "verbs/device_limits.hpp"
#include "verbs/ops.hpp"

using namespace softrdma;

namespace {

// rdma-core's enum ibv_gid_type_sysfs (driver.h, not a public header).
constexpr int kGidTypeSysfsRoceV2 = 1;

void fill_entry(ibv_gid_entry& e, const GidTable& gids, uint32_t index) {
  std::memset(&e, 0, sizeof e);
  const Gid gid = gids.at(index);
  std::memcpy(e.gid.raw, gid.data(), gid.size());
  e.gid_index = index;
  e.port_num = limits::kPortNum;
  e.gid_type = IBV_GID_TYPE_ROCE_V2;
  e.ndev_ifindex = gids.interface_of(index);
}

}  // namespace

SOFTRDMA_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port, int index,
                                  union ibv_gid* gid) {
  if (port != limits::kPortNum || index < 0 || static_cast<uint32_t>(index) >= GidTable::kLength ||
      !gid) {
    errno = EINVAL;
    return -1;
  }
  const Gid g = context_gids(context).at(static_cast<uint32_t>(index));
  std::memcpy(gid->raw, g.data(), g.size());
  return 0;
}

SOFTRDMA_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port, uint32_t index,
                                      ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (port != limits::kPortNum || index >= GidTable::kLength || flags || !entry ||
      entry_size < sizeof(ibv_gid_entry))
    return EINVAL;
  const GidTable& gids = context_gids(context);
  if (index >= gids.populated()) return ENODATA;
  fill_entry(*entry, gids, index);
  return 0;
}

SOFTRDMA_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries,
                                             size_t max_entries, uint32_t flags,
                                             size_t entry_size) {
  const GidTable& gids = context_gids(context);
  if (flags || entry_size < sizeof(ibv_gid_entry) || max_entries < gids.populated()) return -EINVAL;
  for (uint32_t i = 0; i < gids.populated(); ++i) {
    auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) + i * entry_size);
    fill_entry(*e, gids, i);
  }
  return gids.populated();
}

SOFTRDMA_EXPORT int ibv_query_gid_type(ibv_context* context, uint8_t port, unsigned int index,
                                       int* type) {
  if (port != limits::kPortNum || index >= GidTable::kLength || !type) {
    errno = EINVAL;
    return -1;
  }
  if (index >= context_gids(context).populated()) {
    errno = ENODATA;
    return -1;
  }
  *type = kGidTypeSysfsRoceV2;
  return 0;
}

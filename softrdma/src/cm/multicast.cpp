// rdma_join_multicast, rdma_join_multicast_ex and rdma_leave_multicast: the id's UD QP is
// attached to the group (ibv_attach_mcast; not for a send-only join), and the application
// learns how to send to the group from RDMA_CM_EVENT_MULTICAST_JOIN, as with librdmacm.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "cm/cm_context.hpp"
#include "cm/cm_engine.hpp"
#include "cm/cm_objects.hpp"
#include "cm/sync_wait.hpp"
#include "common/export.hpp"

namespace softrdma::cm {
namespace {

constexpr int kJoinTimeoutMs = 2000;

bool is_ipv4_multicast(const sockaddr* addr) {
  return addr && addr->sa_family == AF_INET &&
         IN_MULTICAST(ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr));
}

std::vector<CmId::Group>::iterator find_group(CmId* id, const uint8_t gid[16]) {
  return std::find_if(id->groups.begin(), id->groups.end(),
                      [&](const CmId::Group& g) { return std::memcmp(g.gid, gid, 16) == 0; });
}

int join(CmId* id, const sockaddr* addr, uint32_t flags, void* context) {
  if (!is_ipv4_multicast(addr))
    return fail(addr && addr->sa_family != AF_INET ? EAFNOSUPPORT : EINVAL);
  if (flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return fail(EINVAL);
  {
    std::lock_guard lock(cm_mutex());
    if (!id->id.verbs) return fail(EINVAL);  // bound to the device first (bind or resolve)
    CmId::Group g{};
    gid_of(addr, g.gid);
    g.context = context;
    if (find_group(id, g.gid) != id->groups.end()) return fail(EADDRINUSE);
    g.attached = flags == RDMA_MC_JOIN_FLAG_FULLMEMBER && id->id.qp;
    if (g.attached) {
      ibv_gid gid;
      std::memcpy(gid.raw, g.gid, 16);
      if (const int err = ibv_attach_mcast(id->id.qp, &gid, 0)) return fail(err);
    }
    id->groups.push_back(g);
    post_multicast_join(id, g.gid, context);
  }
  return id->synchronous ? expect_event(id, RDMA_CM_EVENT_MULTICAST_JOIN, kJoinTimeoutMs) : 0;
}

}  // namespace

void leave_all_groups(CmId* id) {
  for (const CmId::Group& g : id->groups) {
    if (!g.attached || !id->id.qp) continue;
    ibv_gid gid;
    std::memcpy(gid.raw, g.gid, 16);
    ibv_detach_mcast(id->id.qp, &gid, 0);
  }
  id->groups.clear();
}

}  // namespace softrdma::cm

using namespace softrdma::cm;

SOFTRDMA_EXPORT int rdma_join_multicast(rdma_cm_id* cm_id, sockaddr* addr, void* context) {
  return join(to_id(cm_id), addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

SOFTRDMA_EXPORT int rdma_join_multicast_ex(rdma_cm_id* cm_id, rdma_cm_join_mc_attr_ex* attr,
                                           void* context) {
  constexpr uint32_t kKnown = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  if (!attr || (attr->comp_mask & ~kKnown) || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS))
    return fail(EINVAL);
  const uint32_t flags = (attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS)
                             ? attr->join_flags
                             : static_cast<uint32_t>(RDMA_MC_JOIN_FLAG_FULLMEMBER);
  return join(to_id(cm_id), attr->addr, flags, context);
}

SOFTRDMA_EXPORT int rdma_leave_multicast(rdma_cm_id* cm_id, sockaddr* addr) {
  CmId* id = to_id(cm_id);
  if (!is_ipv4_multicast(addr)) return fail(EINVAL);
  std::lock_guard lock(cm_mutex());
  uint8_t gid[16];
  gid_of(addr, gid);
  auto it = find_group(id, gid);
  if (it == id->groups.end()) return fail(EADDRNOTAVAIL);
  if (it->attached && id->id.qp) {
    ibv_gid g;
    std::memcpy(g.raw, gid, 16);
    ibv_detach_mcast(id->id.qp, &g, 0);
  }
  id->groups.erase(it);
  return 0;
}

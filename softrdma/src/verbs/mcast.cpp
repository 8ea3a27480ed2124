// ibv_attach_mcast and ibv_detach_mcast: UD QPs join multicast groups (engine/multicast).
#include <cerrno>
#include <cstring>

#include "common/export.hpp"
#include "engine/multicast.hpp"
#include "verbs/device_limits.hpp"
#include "verbs/objects.hpp"

namespace softrdma {

// Returns 0 or the errno the verbs return, with `group` filled.
int check_attachment(ibv_qp* qp, const ibv_gid* gid, Gid& group) {
  if (!qp || !gid || qp->qp_type != IBV_QPT_UD) return EINVAL;
  std::memcpy(group.data(), gid->raw, 16);
  return is_multicast(group) ? 0 : EINVAL;
}

void detach_all_groups(Qp& q) {
  for (const Gid& group : q.mcast_groups) {
    Registry::instance().detach_mcast(group.data(), q.qpx.qp_base.qp_num);
    multicast_leave(group);
  }
  q.mcast_groups.clear();
}

}  // namespace softrdma

using namespace softrdma;

SOFTRDMA_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t) {
  Gid group;
  if (int err = check_attachment(qp, gid, group)) return err;
  Qp& q = *to_qp(qp);
  BiasedLock::Guard lock(q.sq_mutex);
  for (const Gid& g : q.mcast_groups)
    if (g == group) return 0;  // attached already
  if (q.mcast_groups.size() >= limits::kMaxMcastQpAttach) return ENOMEM;
  if (!Registry::instance().attach_mcast(group.data(), qp->qp_num)) return ENOMEM;
  q.mcast_groups.push_back(group);
  multicast_join(group);
  return 0;
}

SOFTRDMA_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t) {
  Gid group;
  if (int err = check_attachment(qp, gid, group)) return err;
  Qp& q = *to_qp(qp);
  BiasedLock::Guard lock(q.sq_mutex);
  for (auto it = q.mcast_groups.begin(); it != q.mcast_groups.end(); ++it) {
    if (*it != group) continue;
    Registry::instance().detach_mcast(group.data(), qp->qp_num);
    multicast_leave(group);
    q.mcast_groups.erase(it);
    return 0;
  }
  return EINVAL;  // not attached to that group
}

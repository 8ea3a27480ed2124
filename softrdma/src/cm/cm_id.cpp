// rdma_cm_id: create/destroy, bind and listen, address and route resolution, connect,
// accept, reject, disconnect, establish, and the QP attributes of each step.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cm/cm_context.hpp"
#include "cm/cm_engine.hpp"
#include "cm/cm_objects.hpp"
#include "cm/route_lookup.hpp"
#include "cm/sync_wait.hpp"
#include "common/export.hpp"
#include "common/secure_random.hpp"
#include "engine/psn.hpp"

namespace softrdma::cm {
namespace {

// Private data limits of the IB CM messages (rdma_connect / rdma_accept / rdma_reject).
constexpr int kReqPrivate = 56, kSidrReqPrivate = 180, kRepPrivate = 196, kSidrRepPrivate = 136,
              kRejPrivate = 148;
// How long the active side waits for the passive side's answer.
constexpr std::chrono::milliseconds kConnectTimeout{30000};

bool is_ud(const CmId* id) {
  return id->id.ps == RDMA_PS_UDP;
}

// The device's limit on RDMA READs and atomics in flight per QP (either direction).
int device_rd_atomic() {
  static const int max = [] {
    ibv_device_attr a{};
    ibv_context* ctx = cm_context();
    return ctx && ibv_query_device(ctx, &a) == 0 ? std::min(a.max_qp_rd_atom, a.max_qp_init_rd_atom)
                                                 : 1;
  }();
  return max;
}

// RDMA_MAX_RESP_RES and RDMA_MAX_INIT_DEPTH (0xFF) ask for the device's maximum.
uint8_t rd_atomic(uint8_t asked) {
  static_assert(RDMA_MAX_RESP_RES == 0xFF && RDMA_MAX_INIT_DEPTH == 0xFF);
  return asked == RDMA_MAX_RESP_RES ? static_cast<uint8_t>(device_rd_atomic()) : asked;
}

// Other values above the device's maximum are refused, as by librdmacm.
bool valid_rd_atomic(const rdma_conn_param* p) {
  return !p || (rd_atomic(p->responder_resources) <= device_rd_atomic() &&
                rd_atomic(p->initiator_depth) <= device_rd_atomic());
}

void fill_local_params(CmMsg& m, const rdma_conn_param* p, int limit) {
  m.responder_resources = p ? rd_atomic(p->responder_resources) : 1;
  m.initiator_depth = p ? rd_atomic(p->initiator_depth) : 1;
  m.retry_count = p ? p->retry_count : 7;
  m.rnr_retry_count = p ? p->rnr_retry_count : 7;
  m.flow_control = p ? p->flow_control : 1;
  m.srq = p ? p->srq : 0;
  if (p && p->private_data && p->private_data_len) {
    m.private_len = static_cast<uint8_t>(std::min<int>(p->private_data_len, limit));
    std::memcpy(m.private_data, p->private_data, m.private_len);
  }
}

int open_socket() {
  return socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

bool is_wildcard(const sockaddr* a) {
  return a->sa_family == AF_INET &&
         reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr == htonl(INADDR_ANY);
}

// In a handshake the peer's end waits for an answer this end will not give now.
bool peer_may_wait(IdState state) {
  return state == IdState::kConnecting || state == IdState::kAwaitEstablish ||
         state == IdState::kAccepting;
}

// Drops events of `id` that the application has not taken yet (the id is going away).
void drop_queued_events(CmId* id) {
  EventChannel* ch = id->channel;
  std::lock_guard lock(ch->mutex);
  for (auto it = ch->queue.begin(); it != ch->queue.end();) {
    if ((*it)->event.id == &id->id) {
      delete *it;
      it = ch->queue.erase(it);
      consume_count(ch);
    } else {
      ++it;
    }
  }
}

}  // namespace

int create_id(rdma_event_channel* channel, rdma_cm_id** out, void* context, rdma_port_space ps) {
  if (!out || (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB)) return fail(EINVAL);
  auto* id = new CmId();
  id->synchronous = channel == nullptr;
  id->channel = channel ? to_channel(channel) : new_channel(id);
  if (!id->channel) {
    delete id;
    return fail(ENOMEM);
  }
  id->id.channel = &id->channel->channel;
  id->id.context = context;
  id->id.ps = ps;
  id->id.qp_type = ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
  id->local_psn = secure_random_u32() & psn::kMask;  // as librdmacm: a random start
  *out = &id->id;
  return 0;
}

}  // namespace softrdma::cm

using namespace softrdma::cm;

SOFTRDMA_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                                   rdma_port_space ps) {
  return create_id(channel, id, context, ps);
}

SOFTRDMA_EXPORT int rdma_destroy_id(rdma_cm_id* cm_id) {
  CmId* id = to_id(cm_id);
  {
    std::unique_lock lock(id->ack_mutex);
    id->all_acked.wait(lock, [id] { return id->events_acked == id->events_reported; });
  }
  {
    std::lock_guard lock(cm_mutex());
    if (id->state == IdState::kConnected && !is_ud(id)) send_msg(id, make_msg(MsgType::kDreq));
    if (id->state == IdState::kRequested) {
      // Nobody will answer this request now: the requester learns it is rejected.
      CmMsg rej = make_msg(is_ud(id) ? MsgType::kSidrRep : MsgType::kRej);
      rej.reject_status = kRejectConsumer;
      send_msg(id, rej);
      release_backlog_slot(id);
    }
    leave_link(id, peer_may_wait(id->state));
    unwatch(id);
    leave_all_groups(id);
    if (id->sock >= 0) close(id->sock);  // a listener's or a bound id's own socket
    id->sock = -1;
    id->state = IdState::kDestroying;
  }
  drop_queued_events(id);
  if (id->synchronous) keep_event(id, nullptr);
  std::free(cm_id->route.path_rec);
  if (id->channel->owner == id) delete_channel(id->channel);
  delete id;
  return 0;
}

SOFTRDMA_EXPORT int rdma_bind_addr(rdma_cm_id* cm_id, sockaddr* addr) {
  CmId* id = to_id(cm_id);
  if (!addr) return fail(EINVAL);
  if (addr->sa_family != AF_INET) return fail(EAFNOSUPPORT);
  std::lock_guard lock(cm_mutex());
  if (id->state != IdState::kIdle) return fail(EINVAL);
  int fd = open_socket();
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, addr, sizeof(sockaddr_in)) != 0) {
    const int err = errno;
    close(fd);
    return fail(err);
  }
  id->sock = fd;
  socklen_t len = sizeof cm_id->route.addr.src_storage;
  getsockname(fd, &cm_id->route.addr.src_addr, &len);
  if (!is_wildcard(addr)) attach_to_device(cm_id);
  id->state = IdState::kBound;
  return 0;
}

SOFTRDMA_EXPORT int rdma_listen(rdma_cm_id* cm_id, int backlog) {
  CmId* id = to_id(cm_id);
  std::lock_guard lock(cm_mutex());
  if (id->state != IdState::kBound) return fail(EINVAL);
  if (listen(id->sock, SOMAXCONN) != 0) return fail(errno);
  id->backlog = backlog > 0 ? backlog : SOMAXCONN;
  id->state = IdState::kListening;
  watch_listener(id);
  return 0;
}

SOFTRDMA_EXPORT int rdma_resolve_addr(rdma_cm_id* cm_id, sockaddr* src, sockaddr* dst,
                                      int timeout_ms) {
  CmId* id = to_id(cm_id);
  if (!dst) return fail(EINVAL);
  if (dst->sa_family != AF_INET) return fail(EAFNOSUPPORT);
  if (src && to_id(cm_id)->state == IdState::kIdle && rdma_bind_addr(cm_id, src) != 0) return -1;
  {
    std::lock_guard lock(cm_mutex());
    std::memcpy(&cm_id->route.addr.dst_storage, dst, sizeof(sockaddr_in));
    sockaddr_in target = *reinterpret_cast<sockaddr_in*>(dst);
    if (target.sin_port == 0) target.sin_port = htons(9);
    // A group is reached from the address the id is bound to, route or not (as IP
    // multicast leaves by the interface chosen for it).
    const bool bound_group_sender = IN_MULTICAST(ntohl(target.sin_addr.s_addr)) &&
                                    id->state == IdState::kBound &&
                                    !is_wildcard(&cm_id->route.addr.src_addr);
    sockaddr_in local{};
    const int err = bound_group_sender ? 0 : route_source(target, &local);
    const bool routed = err == 0;
    if (routed && !bound_group_sender && id->state == IdState::kIdle) {
      local.sin_port = 0;
      std::memcpy(&cm_id->route.addr.src_storage, &local, sizeof local);
    }
    if (routed) {
      attach_to_device(cm_id);
      id->state = IdState::kAddrResolved;
      post_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
    } else {
      id->state = IdState::kAddrResolving;
      // As when ARP gets no answer: the error comes once the timeout has passed.
      after(id, std::chrono::milliseconds(std::max(timeout_ms, 1)), [err](CmId* i) {
        i->state = IdState::kIdle;
        post_event(i, RDMA_CM_EVENT_ADDR_ERROR, -err);
      });
    }
  }
  return id->synchronous ? expect_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, timeout_ms + 1000) : 0;
}

SOFTRDMA_EXPORT int rdma_resolve_route(rdma_cm_id* cm_id, int timeout_ms) {
  CmId* id = to_id(cm_id);
  {
    std::lock_guard lock(cm_mutex());
    if (id->state != IdState::kAddrResolved) return fail(EINVAL);
    auto* path = static_cast<ibv_sa_path_rec*>(std::calloc(1, sizeof(ibv_sa_path_rec)));
    gid_of(&cm_id->route.addr.src_addr, path->sgid.raw);
    gid_of(&cm_id->route.addr.dst_addr, path->dgid.raw);
    path->pkey = htons(0xffff);
    path->mtu = IBV_MTU_4096;
    path->hop_limit = 64;
    std::free(cm_id->route.path_rec);
    cm_id->route.path_rec = path;
    cm_id->route.num_paths = 1;
    std::memcpy(cm_id->route.addr.addr.ibaddr.sgid.raw, path->sgid.raw, 16);
    std::memcpy(cm_id->route.addr.addr.ibaddr.dgid.raw, path->dgid.raw, 16);
    cm_id->route.addr.addr.ibaddr.pkey = 0xffff;
    id->state = IdState::kRouteResolved;
    post_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  }
  return id->synchronous ? expect_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, timeout_ms + 1000) : 0;
}

SOFTRDMA_EXPORT int rdma_connect(rdma_cm_id* cm_id, rdma_conn_param* param) {
  CmId* id = to_id(cm_id);
  const bool ud = is_ud(id);
  if (param && param->private_data_len > (ud ? kSidrReqPrivate : kReqPrivate)) return fail(EINVAL);
  if (!valid_rd_atomic(param)) return fail(EINVAL);
  {
    std::lock_guard lock(cm_mutex());
    if (id->state != IdState::kRouteResolved) return fail(EINVAL);
    CmMsg req = make_msg(ud ? MsgType::kSidrReq : MsgType::kReq);
    req.port_space_udp = ud;
    req.qpn = cm_id->qp ? cm_id->qp->qp_num : (param ? param->qp_num : 0);
    req.psn = id->local_psn;
    req.qkey = RDMA_UDP_QKEY;
    fill_local_params(req, param, ud ? kSidrReqPrivate : kReqPrivate);
    gid_of(&cm_id->route.addr.src_addr, req.gid);
    id->request = req;
    id->retry_count = req.retry_count;
    id->rnr_retry_count = req.rnr_retry_count;
    if (id->sock >= 0) close(id->sock);  // bound by rdma_bind_addr: links bind their own
    id->sock = -1;
    id->refused_until = std::chrono::steady_clock::now() + kRefusedGrace;
    // Connecting before the request can go out: start_connect may send it (and see it fail) now.
    id->state = IdState::kConnecting;
    if (int err = start_connect(id)) {
      id->state = IdState::kRouteResolved;
      return fail(err);
    }
    after(id, kConnectTimeout, [](CmId* i) {
      if (i->state != IdState::kConnecting) return;
      leave_link(i, true);
      i->state = IdState::kRouteResolved;
      post_event(i, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
    });
  }
  return id->synchronous ? expect_event(id, RDMA_CM_EVENT_ESTABLISHED, 60000) : 0;
}

SOFTRDMA_EXPORT int rdma_accept(rdma_cm_id* cm_id, rdma_conn_param* param) {
  CmId* id = to_id(cm_id);
  const bool ud = is_ud(id);
  if (param && param->private_data_len > (ud ? kSidrRepPrivate : kRepPrivate)) return fail(EINVAL);
  if (!valid_rd_atomic(param)) return fail(EINVAL);
  {
    std::lock_guard lock(cm_mutex());
    if (id->state != IdState::kRequested) return fail(EINVAL);
    if (!ud) {
      if (int err = connect_qp(id)) return fail(err);
    }
    CmMsg rep = make_msg(ud ? MsgType::kSidrRep : MsgType::kRep);
    rep.port_space_udp = ud;
    rep.qpn = cm_id->qp ? cm_id->qp->qp_num : (param ? param->qp_num : 0);
    rep.psn = id->local_psn;
    rep.qkey = RDMA_UDP_QKEY;
    fill_local_params(rep, param, ud ? kSidrRepPrivate : kRepPrivate);
    gid_of(&cm_id->route.addr.src_addr, rep.gid);
    release_backlog_slot(id);
    if (!send_msg(id, rep)) {
      leave_link(id, false);
      id->state = IdState::kDisconnected;
      return fail(ECONNRESET);
    }
    if (ud) {
      leave_link(id, false);  // SIDR has no further messages
      id->state = IdState::kConnected;
      return 0;
    }
    id->state = IdState::kAccepting;
  }
  return id->synchronous ? expect_event(id, RDMA_CM_EVENT_ESTABLISHED, 60000) : 0;
}

SOFTRDMA_EXPORT int rdma_reject(rdma_cm_id* cm_id, const void* private_data,
                                uint8_t private_data_len) {
  CmId* id = to_id(cm_id);
  if (private_data_len > kRejPrivate) return fail(EINVAL);
  std::lock_guard lock(cm_mutex());
  if (id->state != IdState::kRequested) return fail(EINVAL);
  CmMsg rej = make_msg(is_ud(id) ? MsgType::kSidrRep : MsgType::kRej);
  rej.reject_status = kRejectConsumer;
  rej.private_len = private_data ? private_data_len : 0;
  if (rej.private_len) std::memcpy(rej.private_data, private_data, rej.private_len);
  send_msg(id, rej);
  release_backlog_slot(id);
  leave_link(id, false);
  id->state = IdState::kDisconnected;
  return 0;
}

SOFTRDMA_EXPORT int rdma_disconnect(rdma_cm_id* cm_id) {
  CmId* id = to_id(cm_id);
  std::lock_guard lock(cm_mutex());
  switch (id->state) {
    case IdState::kConnected:
      if (is_ud(id)) {
        leave_link(id, false);
        id->state = IdState::kDisconnected;
        return 0;
      }
      // DISCONNECTED follows when the peer acknowledges (or is found gone).
      if (!send_msg(id, make_msg(MsgType::kDreq))) {
        disconnected(id);
        return 0;
      }
      fail_qp(id);
      id->state = IdState::kDisconnecting;
      return 0;
    case IdState::kDisconnecting:
      return 0;  // already on its way
    case IdState::kAccepting:
    case IdState::kAwaitEstablish:
    case IdState::kConnecting:
      leave_link(id, true);
      id->state = IdState::kDisconnected;
      return 0;
    case IdState::kDisconnected:
      return 0;  // the peer was first: nothing left to tear down
    default:
      return fail(EINVAL);
  }
}

SOFTRDMA_EXPORT int rdma_establish(rdma_cm_id* cm_id) {
  CmId* id = to_id(cm_id);
  std::lock_guard lock(cm_mutex());
  if (id->state != IdState::kAwaitEstablish) return fail(EINVAL);
  if (!send_msg(id, make_msg(MsgType::kRtu))) return fail(ECONNRESET);
  id->state = IdState::kConnected;
  return 0;
}

SOFTRDMA_EXPORT int rdma_init_qp_attr(rdma_cm_id* cm_id, ibv_qp_attr* attr, int* mask) {
  if (!attr || !mask) return fail(EINVAL);
  std::lock_guard lock(cm_mutex());
  if (int err = connection_qp_attr(to_id(cm_id), attr, mask)) return fail(err);
  return 0;
}

SOFTRDMA_EXPORT int rdma_migrate_id(rdma_cm_id* cm_id, rdma_event_channel* channel) {
  CmId* id = to_id(cm_id);
  EventChannel* target = channel ? to_channel(channel) : new_channel(id);
  if (!target) return fail(ENOMEM);
  std::lock_guard lock(cm_mutex());
  EventChannel* old = id->channel;
  id->channel = target;
  id->synchronous = channel == nullptr;
  cm_id->channel = &target->channel;
  if (old->owner == id) delete_channel(old);
  return 0;
}

SOFTRDMA_EXPORT int rdma_set_option(rdma_cm_id* cm_id, int level, int optname, void* optval,
                                    size_t optlen) {
  if (!optval) return fail(EINVAL);
  if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_ACK_TIMEOUT && optlen >= 1) {
    to_id(cm_id)->ack_timeout = *static_cast<uint8_t*>(optval);
    return 0;
  }
  // TOS, REUSEADDR, AFONLY and IB paths have no effect on a software fabric.
  if ((level == RDMA_OPTION_ID && optname >= RDMA_OPTION_ID_TOS &&
       optname <= RDMA_OPTION_ID_ACK_TIMEOUT) ||
      (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH))
    return 0;
  return fail(ENOSYS);
}

SOFTRDMA_EXPORT int rdma_notify(rdma_cm_id*, ibv_event_type) {
  return 0;
}

SOFTRDMA_EXPORT __be16 rdma_get_src_port(rdma_cm_id* cm_id) {
  return cm_id->route.addr.src_sin.sin_port;
}

SOFTRDMA_EXPORT __be16 rdma_get_dst_port(rdma_cm_id* cm_id) {
  return cm_id->route.addr.dst_sin.sin_port;
}

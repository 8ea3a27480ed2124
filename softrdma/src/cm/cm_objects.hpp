// The connection manager's objects: event channels, events and ids. Each embeds the
// public struct first, so the application's pointer converts back to ours.
#pragma once

#include <rdma/rdma_cma.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "cm/cm_wire.hpp"
#include "common/object_pool.hpp"

// From softrdma's libibverbs (node SOFTRDMA_PRIVATE_1): stops a QP of this process.
extern "C" int softrdma_qp_error(uint32_t qpn);

namespace softrdma::cm {

struct CmId;

struct Event {
  rdma_cm_event event;  // first
  uint8_t private_data[kMaxPrivateData];
  CmId* counted_on = nullptr;  // the id whose events_reported this event incremented
};

struct EventChannel {
  rdma_event_channel channel;  // first: {int fd}, readable while events wait
  std::mutex mutex;
  std::condition_variable arrived;  // for synchronous ids, which wait without the fd
  // The eventfd's count plus `unsignalled` equals the queue's length (all change under
  // mutex). Events a thread posts while it serves the sockets waiting for this channel
  // (serving_wait.hpp) are not signalled: it takes one of them itself at once, and
  // signals the rest before it returns.
  std::deque<Event*> queue;
  uint64_t unsignalled = 0;
  // Threads blocked in rdma_get_cm_event. As with the kernel's channel, a reader inside when
  // the channel is destroyed waits for ever (rping's event thread relies on it); the channel's
  // memory then stays for it.
  int waiters = 0;
  bool destroyed = false;
  // The synchronous id this channel is private to (its children share it until
  // rdma_get_request gives them their own); null for application channels.
  const CmId* owner = nullptr;
};

enum class IdState {
  kIdle,
  kBound,
  kListening,
  kAddrResolving,
  kAddrResolved,
  kRouteResolved,
  kConnecting,      // REQ sent, waiting for REP
  kAwaitEstablish,  // REP received, the application drives its own QP (rdma_establish)
  kAccepting,       // REP sent, waiting for RTU
  kRequested,       // a child that received a REQ, not yet accepted
  kConnected,
  kDisconnecting,  // DREQ sent, waiting for DREP
  kDisconnected,
  kDestroying,
};

struct CmId : Pooled<CmId> {
  rdma_cm_id id;  // first
  EventChannel* channel = nullptr;
  bool synchronous = false;
  IdState state = IdState::kIdle;
  int sock = -1;      // a listener's or bound id's socket, or the link a connection travels on
  uint32_t conn = 0;  // the connection's number on that link (0: not on a link)
  // The request went on a link made for an earlier connection: if the link turns out
  // gone before an answer (its passive side closed it meanwhile), a new one is made.
  bool on_reused_link = false;
  CmId* listener = nullptr;    // children: the listening id, while their request is pending
  std::vector<CmId*> pending;  // listeners: children whose request is not answered yet
  int backlog = 0;
  std::atomic<int> pending_requests{0};  // children not yet accepted or rejected
  // What the peer told us (REQ/REP/SIDR): its QP and transport parameters.
  CmMsg peer{};
  uint32_t local_psn = 0;
  uint32_t rc_qpn = 0;  // the RC QP rdma_create_qp made for this id (0: none)
  uint8_t ack_timeout = 14;
  uint8_t retry_count = 7;  // for our QP's RTS, from the active side's conn_param
  uint8_t rnr_retry_count = 7;
  CmMsg request{};  // the active side's REQ (or SIDR REQ), sent once TCP connects
  // Until then a refused connection is tried again (see kRefusedGrace).
  std::chrono::steady_clock::time_point refused_until{};
  // Multicast groups joined (rdma_join_multicast), with the application's context.
  struct Group {
    uint8_t gid[16];
    void* context;
    bool attached;  // its QP is a member (not a send-only join)
  };
  std::vector<Group> groups;
  // rdma_create_ep: the QP every child of a listening endpoint gets.
  bool has_child_qp_attr = false;
  ibv_qp_init_attr child_qp_attr{};
  ibv_pd* child_pd = nullptr;
  // Events rdma_get_cm_event handed out for this id (a connection request counts on its
  // listener) and those acknowledged: rdma_destroy_id waits until they are equal, as
  // librdmacm does, so an event thread never handles an event of a destroyed id.
  std::mutex ack_mutex;
  std::condition_variable all_acked;
  uint64_t events_reported = 0;
  uint64_t events_acked = 0;
};

/// How librdmacm's calls fail: errno set, -1 returned.
inline int fail(int err) {
  errno = err;
  return -1;
}

inline EventChannel* to_channel(rdma_event_channel* c) {
  return reinterpret_cast<EventChannel*>(c);
}
inline CmId* to_id(rdma_cm_id* i) {
  return reinterpret_cast<CmId*>(i);
}
// to_id relies on it (the pool's empty base takes no room).
static_assert(offsetof(CmId, id) == 0);

/// Queues an event for `id` on its channel. `msg` (optional) supplies private data and
/// connection parameters.
void post_event(CmId* id, rdma_cm_event_type type, int status, const CmMsg* msg = nullptr,
                CmId* listen_id = nullptr);

/// Queues RDMA_CM_EVENT_MULTICAST_JOIN for group `gid`: the address handle, QP number and
/// qkey a sender to the group uses, and the join's `context` as its private data.
void post_multicast_join(CmId* id, const uint8_t gid[16], void* context);

/// Leaves every multicast group the id joined (rdma_destroy_id).
void leave_all_groups(CmId* id);

/// Synchronous ids: waits for the next event of `id`; returns it, or nullptr on timeout.
Event* wait_event(CmId* id, int timeout_ms);

/// Takes one from the channel's count for an event leaving the queue (the caller holds
/// ch->mutex): an unsignalled one first, else from the eventfd.
void consume_count(EventChannel* ch);

}  // namespace softrdma::cm

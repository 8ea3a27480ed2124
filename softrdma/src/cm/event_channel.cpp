// Event channels: rdma_create_event_channel, rdma_get_cm_event, rdma_ack_cm_event.
#include <sys/eventfd.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "cm/cm_context.hpp"
#include "cm/cm_objects.hpp"
#include "common/export.hpp"

namespace softrdma::cm {
namespace {

void fill_params(Event& e, CmId* id, const CmMsg& m) {
  std::memcpy(e.private_data, m.private_data, m.private_len);
  if (id->id.ps == RDMA_PS_UDP) {
    rdma_ud_param& ud = e.event.param.ud;
    ud.private_data = m.private_len ? e.private_data : nullptr;
    ud.private_data_len = m.private_len;
    ud.qp_num = m.qpn;
    ud.qkey = m.qkey;
    ud.ah_attr = address_to(id->id.verbs, m.gid, local_gid_index(id));
  } else {
    rdma_conn_param& c = e.event.param.conn;
    c.private_data = m.private_len ? e.private_data : nullptr;
    c.private_data_len = m.private_len;
    c.responder_resources = m.responder_resources;
    c.initiator_depth = m.initiator_depth;
    c.flow_control = m.flow_control;
    c.retry_count = m.retry_count;
    c.rnr_retry_count = m.rnr_retry_count;
    c.srq = m.srq;
    c.qp_num = m.qpn;
  }
}

Event* pop(EventChannel* ch) {
  std::lock_guard lock(ch->mutex);
  if (ch->queue.empty()) return nullptr;
  Event* e = ch->queue.front();
  ch->queue.pop_front();
  return e;
}

}  // namespace

void post_event(CmId* id, rdma_cm_event_type type, int status, const CmMsg* msg, CmId* listen_id) {
  auto* e = new Event();
  e->event.id = &id->id;
  e->event.listen_id = listen_id ? &listen_id->id : nullptr;
  e->event.event = type;
  e->event.status = status;
  if (msg) fill_params(*e, id, *msg);
  EventChannel* ch = id->channel;
  {
    std::lock_guard lock(ch->mutex);
    ch->queue.push_back(e);
  }
  ch->arrived.notify_all();
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(ch->channel.fd, &one, sizeof one);
}

Event* wait_event(CmId* id, int timeout_ms) {
  EventChannel* ch = id->channel;
  std::unique_lock lock(ch->mutex);
  if (!ch->arrived.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                            [ch] { return !ch->queue.empty(); }))
    return nullptr;
  Event* e = ch->queue.front();
  ch->queue.pop_front();
  uint64_t count;  // keep the fd's count equal to the queue's length
  [[maybe_unused]] ssize_t n = read(ch->channel.fd, &count, sizeof count);
  return e;
}

EventChannel* new_channel(const CmId* owner) {
  auto* ch = new EventChannel();
  ch->channel.fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC | (owner ? EFD_NONBLOCK : 0));
  ch->owner = owner;
  if (ch->channel.fd < 0) {
    delete ch;
    return nullptr;
  }
  return ch;
}

void delete_channel(EventChannel* ch) {
  for (Event* e : ch->queue) delete e;
  close(ch->channel.fd);
  delete ch;
}

}  // namespace softrdma::cm

using namespace softrdma::cm;

SOFTRDMA_EXPORT rdma_event_channel* rdma_create_event_channel() {
  EventChannel* ch = new_channel(nullptr);
  return ch ? &ch->channel : nullptr;
}

SOFTRDMA_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
  delete_channel(to_channel(channel));
}

SOFTRDMA_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (!channel || !event) {
    errno = EINVAL;
    return -1;
  }
  for (;;) {
    uint64_t count;
    if (read(channel->fd, &count, sizeof count) != sizeof count) return -1;  // errno set
    // Empty only if the event's id was destroyed meanwhile: wait for the next one.
    if (Event* e = pop(to_channel(channel))) {
      *event = &e->event;
      return 0;
    }
  }
}

SOFTRDMA_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  if (!event) {
    errno = EINVAL;
    return -1;
  }
  delete reinterpret_cast<Event*>(event);
  return 0;
}

SOFTRDMA_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
  static const char* const names[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",   "RDMA_CM_EVENT_ADDR_ERROR",
      "RDMA_CM_EVENT_ROUTE_RESOLVED",  "RDMA_CM_EVENT_ROUTE_ERROR",
      "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",   "RDMA_CM_EVENT_UNREACHABLE",
      "RDMA_CM_EVENT_REJECTED",        "RDMA_CM_EVENT_ESTABLISHED",
      "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN",  "RDMA_CM_EVENT_MULTICAST_ERROR",
      "RDMA_CM_EVENT_ADDR_CHANGE",     "RDMA_CM_EVENT_TIMEWAIT_EXIT"};
  const auto i = static_cast<size_t>(event);
  return i < sizeof names / sizeof names[0] ? names[i] : "UNKNOWN EVENT";
}

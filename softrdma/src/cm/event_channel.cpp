// Event channels: rdma_create_event_channel, rdma_get_cm_event, rdma_ack_cm_event.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <unordered_set>

#include "cm/cm_context.hpp"
#include "cm/cm_objects.hpp"
#include "cm/serving_wait.hpp"
#include "common/export.hpp"
#include "wire/socket_io.hpp"

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

}  // namespace

void consume_count(EventChannel* ch) {
  if (ch->unsignalled != 0) {
    --ch->unsignalled;
    return;
  }
  // The eventfd's count covers the rest of the queue, so this read of a semaphore eventfd
  // finds it non-zero and does not block.
  uint64_t count;
  [[maybe_unused]] ssize_t n = read(ch->channel.fd, &count, sizeof count);
}

namespace {

// The channel this thread waits for while it serves the CM's sockets: what it posts there
// it will take itself, so nobody needs waking (the eventfd's write and read are skipped).
thread_local const EventChannel* t_serving_for = nullptr;

// Makes the eventfd count every event still queued, before the serving thread returns.
void signal_the_rest(EventChannel* ch) {
  if (ch->unsignalled == 0) return;
  [[maybe_unused]] ssize_t n = write(ch->channel.fd, &ch->unsignalled, sizeof ch->unsignalled);
  ch->unsignalled = 0;
  ch->arrived.notify_all();  // another thread may wait for this channel too
}

// Channels alive. A thread that enters rdma_get_cm_event on a channel another
// thread has destroyed finds it missing here and waits for ever: with the kernel's channel it
// would either be inside read() already (and wait for ever) or read a closed fd, and
// rping's event thread, which comes back after the main thread closed the channel,
// relies on the first.
std::mutex& live_mutex() {
  static auto* m = new std::mutex;  // never destroyed: event threads may outlive exit()
  return *m;
}
std::unordered_set<const EventChannel*>& live_channels() {
  static auto* set = new std::unordered_set<const EventChannel*>;
  return *set;
}

[[noreturn]] void wait_forever() {
  for (;;) pause();
}

// The caller holds ch->mutex and has seen the queue non-empty.
Event* take_front(EventChannel* ch) {
  Event* e = ch->queue.front();
  ch->queue.pop_front();
  consume_count(ch);
  return e;
}

Event* new_event(CmId* id, rdma_cm_event_type type, int status) {
  auto* e = new Event();
  e->event.id = &id->id;
  e->event.event = type;
  e->event.status = status;
  return e;
}

void enqueue(CmId* id, Event* e) {
  EventChannel* ch = id->channel;
  {
    std::lock_guard lock(ch->mutex);
    ch->queue.push_back(e);
    if (ch == t_serving_for) {
      ++ch->unsignalled;
      return;  // nobody to wake: the thread that waits for it posted it
    }
    wire::notify_eventfd(ch->channel.fd);
  }
  ch->arrived.notify_all();
}

}  // namespace

void post_event(CmId* id, rdma_cm_event_type type, int status, const CmMsg* msg, CmId* listen_id) {
  Event* e = new_event(id, type, status);
  e->event.listen_id = listen_id ? &listen_id->id : nullptr;
  if (msg) fill_params(*e, id, *msg);
  enqueue(id, e);
}

void post_multicast_join(CmId* id, const uint8_t gid[16], void* context) {
  Event* e = new_event(id, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
  rdma_ud_param& ud = e->event.param.ud;
  ud.private_data = context;
  ud.ah_attr = address_to(id->id.verbs, gid, local_gid_index(id));
  ud.qp_num = 0xffffff;  // a multicast message's destination QP number (IBTA 10.5.2.5)
  ud.qkey = RDMA_UDP_QKEY;
  enqueue(id, e);
}

Event* wait_event(CmId* id, int timeout_ms) {
  EventChannel* ch = id->channel;
  std::unique_lock lock(ch->mutex);
  if (!ch->arrived.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                            [ch] { return !ch->queue.empty(); }))
    return nullptr;
  return take_front(ch);
}

EventChannel* new_channel(const CmId* owner) {
  auto* ch = new EventChannel();
  ch->channel.fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC | (owner ? EFD_NONBLOCK : 0));
  ch->owner = owner;
  if (ch->channel.fd < 0) {
    delete ch;
    return nullptr;
  }
  std::lock_guard lock(live_mutex());
  live_channels().insert(ch);
  return ch;
}

void delete_channel(EventChannel* ch) {
  {
    std::lock_guard live(live_mutex());
    live_channels().erase(ch);
    std::lock_guard lock(ch->mutex);
    for (Event* e : ch->queue) delete e;
    ch->queue.clear();
    close(ch->channel.fd);
    ch->destroyed = true;
    if (ch->waiters > 0) return;  // they keep it (see EventChannel::waiters)
  }
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
  EventChannel* ch = to_channel(channel);
  std::unique_lock live(live_mutex());
  if (!live_channels().contains(ch)) {
    live.unlock();
    wait_forever();
  }
  std::unique_lock lock(ch->mutex);
  live.unlock();
  if (ch->queue.empty()) {
    const int flags = fcntl(channel->fd, F_GETFL);  // valid: closed only under ch->mutex
    if (flags < 0) return -1;                       // errno set
    if (flags & O_NONBLOCK) {
      errno = EAGAIN;
      return -1;
    }
  }
  ++ch->waiters;
  // Serve the CM's sockets while waiting (serving_wait.hpp); rounds that bring no event
  // leave the rest of the wait to the CM thread.
  const int fd = channel->fd;
  for (int round = 0; round < kServedRounds && ch->queue.empty() && !ch->destroyed; ++round) {
    lock.unlock();
    t_serving_for = ch;
    const bool served = serve_sockets_once(fd);
    t_serving_for = nullptr;
    lock.lock();
    if (!served) break;
  }
  // Woken by post_event; an event dropped with its id before we run leaves the queue empty.
  ch->arrived.wait(lock, [ch] { return !ch->queue.empty() || ch->destroyed; });
  if (ch->destroyed) ch->arrived.wait(lock, [] { return false; });  // never returns
  --ch->waiters;
  Event* e = take_front(ch);
  signal_the_rest(ch);
  lock.unlock();
  rdma_cm_id* counted = e->event.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->event.listen_id
                            ? e->event.listen_id
                            : e->event.id;
  e->counted_on = to_id(counted);
  {
    std::lock_guard ack_lock(e->counted_on->ack_mutex);
    ++e->counted_on->events_reported;
  }
  *event = &e->event;
  return 0;
}

SOFTRDMA_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  if (!event) {
    errno = EINVAL;
    return -1;
  }
  auto* e = reinterpret_cast<Event*>(event);
  if (CmId* id = e->counted_on) {
    std::lock_guard lock(id->ack_mutex);
    ++id->events_acked;
    id->all_acked.notify_all();
  }
  delete e;
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

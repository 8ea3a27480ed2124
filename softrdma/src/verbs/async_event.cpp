// Asynchronous events: read from the context's async fd, one per event.
#include <unistd.h>
#include <cerrno>

#include "common/export.hpp"
#include "verbs/objects.hpp"

using namespace softrdma;

namespace {

void fill_element(ibv_async_event& e, uint64_t handle) {
  switch (e.event_type) {
    case IBV_EVENT_CQ_ERR:
      e.element.cq = reinterpret_cast<ibv_cq*>(handle);
      break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      e.element.srq = reinterpret_cast<ibv_srq*>(handle);
      break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_GID_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
      e.element.port_num = static_cast<int>(handle);
      break;
    case IBV_EVENT_DEVICE_FATAL:
      break;
    default:
      e.element.qp = reinterpret_cast<ibv_qp*>(handle);
  }
}

}  // namespace

SOFTRDMA_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  ContextShared* shared = to_ctx(context)->shared;
  uint64_t count;
  if (read(context->async_fd, &count, sizeof count) != sizeof count) return -1;
  AsyncEntry entry;
  {
    ProcessLockGuard guard(shared->lock);
    if (shared->head == shared->tail) {
      errno = EAGAIN;
      return -1;
    }
    entry = shared->ring[shared->head % ContextShared::kAsyncCapacity];
    ++shared->head;
  }
  event->event_type = static_cast<ibv_event_type>(entry.event_type);
  fill_element(*event, entry.handle);
  return 0;
}

SOFTRDMA_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  // Objects are freed by their destroy verbs, which do not wait for async acks.
  (void)event;
}

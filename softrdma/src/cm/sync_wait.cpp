#include "cm/sync_wait.hpp"

#include <cerrno>

namespace softrdma::cm {

void keep_event(CmId* id, Event* e) {
  delete reinterpret_cast<Event*>(id->id.event);  // the previous step's event is acked now
  id->id.event = e ? &e->event : nullptr;
}

int expect_event(CmId* id, rdma_cm_event_type want, int timeout_ms) {
  Event* e = wait_event(id, timeout_ms);
  keep_event(id, e);  // as librdmacm: the event stays readable in id->event
  if (!e) {
    errno = ETIMEDOUT;
    return -1;
  }
  const rdma_cm_event_type got = e->event.event;
  const int status = e->event.status;
  if (got == want) return 0;
  switch (got) {
    case RDMA_CM_EVENT_REJECTED:
      errno = ECONNREFUSED;
      break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      errno = status < 0 ? -status : EHOSTUNREACH;
      break;
    case RDMA_CM_EVENT_UNREACHABLE:
      errno = ENETUNREACH;
      break;
    default:
      errno = ECONNRESET;
  }
  return -1;
}

}  // namespace softrdma::cm

#include "cm/sync_wait.hpp"

#include <cerrno>

namespace softrdma::cm {

int expect_event(CmId* id, rdma_cm_event_type want, int timeout_ms) {
  Event* e = wait_event(id, timeout_ms);
  if (!e) {
    errno = ETIMEDOUT;
    return -1;
  }
  const rdma_cm_event_type got = e->event.event;
  const int status = e->event.status;
  delete e;
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

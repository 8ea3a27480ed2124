#include "cm/serving_wait.hpp"

#include <poll.h>

#include <cerrno>
#include <mutex>

#include "cm/cm_engine.hpp"

namespace softrdma::cm {

bool serve_sockets_once(int channel_fd) {
  int sockets = -1;
  {
    std::lock_guard lock(cm_mutex());
    sockets = claim_sockets();
  }
  if (sockets < 0) return false;
  // The channel's fd: an event posted by the CM thread or another call.
  pollfd fds[2] = {{channel_fd, POLLIN, 0}, {sockets, POLLIN, 0}};
  int ready = 0;
  do {
    ready = poll(fds, 2, -1);
  } while (ready < 0 && errno == EINTR);
  std::lock_guard lock(cm_mutex());
  if (ready > 0 && fds[1].revents != 0) serve_ready_sockets();
  release_sockets();
  return ready > 0;
}

}  // namespace softrdma::cm

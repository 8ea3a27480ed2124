#include "cm/serving_wait.hpp"

#include <poll.h>

#include <cerrno>
#include <mutex>

#include "cm/cm_engine.hpp"

namespace softrdma::cm {
namespace {

// A channel with more sockets than this is left to the CM thread: polling every one of
// them on each wait would cost more than the thread switch it saves.
constexpr size_t kMaxServedSockets = 64;

}  // namespace

bool serve_channel_once(EventChannel* ch, int channel_fd) {
  ClaimedSocket sockets[kMaxServedSockets];
  size_t n = 0;
  {
    std::lock_guard lock(cm_mutex());
    n = claim_channel_sockets(ch, sockets, kMaxServedSockets);
  }
  if (n == 0 || n > kMaxServedSockets) return false;
  pollfd fds[kMaxServedSockets + 1];
  fds[0] = {channel_fd, POLLIN, 0};  // an event posted by the CM thread or another call
  for (size_t i = 0; i < n; ++i) fds[i + 1] = {sockets[i].fd, POLLIN, 0};
  int ready = 0;
  do {
    ready = poll(fds, static_cast<nfds_t>(n + 1), -1);
  } while (ready < 0 && errno == EINTR);
  std::lock_guard lock(cm_mutex());
  for (size_t i = 1; ready > 0 && i <= n; ++i)
    if (fds[i].revents != 0) serve_socket(ch, fds[i].fd);
  release_channel_sockets(sockets, n);
  return ready > 0;
}

}  // namespace softrdma::cm

// What an application's poll looks at across hosts. Every link and inbound connection of the
// process is also in one epoll set of its own, so a poll that finds nothing costs one system
// call, not a recv per link beside an epoll_wait for the inbound connections (a system call
// costs 1-2 µs in this guest). A process with links only reads them directly: the recv that
// finds nothing is then the one call, and the one that finds an answer takes it at once.
// The library's threads keep their own ways of waiting.
#pragma once

#include <atomic>
#include <cstddef>

#include "wire/listener.hpp"

namespace softrdma::wire {

struct Arrivals {
  static constexpr int kMost = 16;
  bool responses = false;  // some link has bytes (or hung up)
  int requests = 0;        // inbound connections with bytes, in request_fds
  int request_fds[kMost];
};

/// Adds a link's socket (`is_link`) or an inbound connection's to the set.
void watch_for_polls(int fd, bool is_link);
/// Takes a socket out of the set; call it before closing the socket.
void unwatch_for_polls(int fd);

/// Sockets in the set (of this process; a forked child starts again).
inline std::atomic<size_t> watched_for_polls{0};

Arrivals arrivals_now();
/// What has arrived on the process's sockets, without waiting; nothing, without a system
/// call, in a process that has none; "look at the links" in one without inbound connections.
inline Arrivals arrivals() {
  if (watched_for_polls.load(std::memory_order_relaxed) == 0) return {};
  if (inbound_connections.load(std::memory_order_relaxed) == 0) {
    Arrivals links_only;
    links_only.responses = true;
    return links_only;
  }
  return arrivals_now();
}

}  // namespace softrdma::wire

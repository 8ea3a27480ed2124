// What an application's poll looks at across hosts. Every link and inbound connection of the
// process is also in one epoll set of its own, so a poll that finds nothing costs one system
// call, not a recv per link beside an epoll_wait for the inbound connections (a system call
// costs 1-2 µs in this guest). A process with links only reads them directly: the recv that
// finds nothing is then the one call, and the one that finds an answer takes it at once.
// Even that call costs many times the rest of a poll, and an application that busy-polls
// makes it millions of times a second, so a thread looks at the sockets on every
// kLookEvery-th poll only (its first included): across two hosts that made
// `ib_send_lat` 12.1 -> 10.6 us and `ib_write_bw` 64 KiB 14% faster, where looking on every
// 32nd poll made both latencies about 1 us slower again. The library's threads keep their
// own ways of waiting, so what a thread's polls do not take is still served.
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

inline constexpr unsigned kLookEvery = 8;
static_assert((kLookEvery & (kLookEvery - 1)) == 0, "counted by masking");
/// The polls this thread has made, counted to pick every kLookEvery-th.
inline thread_local unsigned t_polls = 0;

Arrivals arrivals_now();
/// What has arrived on the process's sockets, without waiting, on every kLookEvery-th poll
/// of this thread (nothing on the others); nothing, without a system call, in a
/// process that has no sockets; "look at the links" in one without inbound connections.
inline Arrivals arrivals() {
  if (watched_for_polls.load(std::memory_order_relaxed) == 0) return {};
  if ((t_polls++ & (kLookEvery - 1)) != 0) return {};
  if (inbound_connections.load(std::memory_order_relaxed) == 0) {
    Arrivals links_only;
    links_only.responses = true;
    return links_only;
  }
  return arrivals_now();
}

}  // namespace softrdma::wire

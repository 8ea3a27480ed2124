// What an application's poll (or post, wire/application_looks.hpp) looks at across hosts. A process
// with few sockets (links and inbound connections, kReadDirectlyAtMost) reads each of them
// directly: a recv that finds nothing costs one system call, and one that finds a message takes it
// at once. With more, every link and inbound connection is also in one epoll set of its own, so a
// poll that finds nothing costs one system call, not a recv per socket (a system call costs 1-2 µs
// in this guest). Reading directly is the faster way to notice a message: a busy-polled TCP
// ping-pong across two namespaces here took 5.5 µs one way reading two sockets in turn and
// 7.8 µs with epoll_wait before each recv.
// Even that call costs many times the rest of a poll, and an application that busy-polls
// makes it millions of times a second, so a thread looks at the sockets on every
// kLookEvery-th poll or post only (its first included): across two hosts that made
// `ib_send_lat` 12.1 -> 10.6 us and `ib_write_bw` 64 KiB 14% faster, where looking on every
// 32nd poll made both latencies about 1 us slower again. The library's threads keep their
// own ways of waiting, so what a thread's polls do not take is still served.
#pragma once

#include <atomic>
#include <cstddef>

#include "common/unlocked_count.hpp"

namespace softrdma::wire {

struct Arrivals {
  static constexpr int kMost = 16;
  bool responses = false;  // some link may have bytes (or hung up): read the links
  int requests = 0;        // inbound connections to read, in request_fds
  int request_fds[kMost];
};

/// Sockets of a process that its polls read directly, without asking epoll which are ready.
inline constexpr size_t kReadDirectlyAtMost = 4;
static_assert(kReadDirectlyAtMost <= Arrivals::kMost);

/// Adds a link's socket (`is_link`) or an inbound connection's to the set.
void watch_for_polls(int fd, bool is_link);
/// Takes a socket out of the set; call it before closing the socket.
void unwatch_for_polls(int fd);

/// Sockets in the set (of this process; a forked child starts again).
inline std::atomic<size_t> watched_for_polls{0};

inline constexpr unsigned kLookEvery = 8;
static_assert((kLookEvery & (kLookEvery - 1)) == 0, "counted by masking");
/// The polls and posts this thread has made, counted to pick every kLookEvery-th.
/// Initial-exec: a thread_local of a shared library otherwise costs a __tls_get_addr call
/// per poll.
[[gnu::tls_model("initial-exec")]] inline thread_local unsigned t_calls = 0;

/// Looks applications' calls have made at every socket of this process: a background thread
/// that sees it move knows they are polling or posting and will take what arrives. Counted
/// without a locked instruction; a count lost to a race between two threads does not matter.
inline std::atomic<uint64_t> looks_by_applications{0};

/// This call of the thread is one that looks at the sockets (arrivals() reads them).
inline bool looking_now() {
  return (t_calls & (kLookEvery - 1)) == 0;
}

/// What to read of the process's sockets now (one look): every socket in a process with few
/// (the reads tell what arrived), those epoll finds readable in one with more.
Arrivals arrivals_now(size_t watched);
/// What to read of the process's sockets, without waiting, on every kLookEvery-th poll or
/// post of this thread (nothing on the others); nothing, without a system call, in a
/// process that has no sockets.
inline Arrivals arrivals() {
  const size_t watched = watched_for_polls.load(std::memory_order_relaxed);
  if (watched == 0) return {};
  if ((t_calls++ & (kLookEvery - 1)) != 0) return {};
  return arrivals_now(watched);
}

}  // namespace softrdma::wire

#include "wire/arrivals.hpp"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/current_pid.hpp"

namespace softrdma::wire {
namespace {

// The tag that tells a link's socket from an inbound connection's in the set.
constexpr uint64_t kLinkTag = uint64_t{1} << 32;

struct PollSet {
  std::mutex mutex;  // for making the set and changing it
  std::atomic<int> epfd{-1};
  std::atomic<pid_t> pid{0};  // a forked child must not share its parent's set
  // The inbound connections, while few enough to read directly; -1 in unused places. A
  // poll may read a number just closed, or reused: the responder finds the connection by
  // number under its lock, so it serves whatever connection has it, or none.
  std::atomic<int> inbound[kReadDirectlyAtMost];
  std::atomic<size_t> inbound_count{0};  // all of them, listed or not
  std::vector<int> inbound_all;          // under the mutex
  PollSet() {
    for (auto& fd : inbound) fd.store(-1, std::memory_order_relaxed);
  }
};

PollSet& poll_set() {
  static auto* set = new PollSet;  // never destroyed: polls may run while exit() does
  return *set;
}

// This process's set, or -1 (none yet).
int current_epfd(const PollSet& s) {
  return s.pid.load(std::memory_order_acquire) == current_pid()
             ? s.epfd.load(std::memory_order_relaxed)
             : -1;
}

// Caller holds the mutex. Lists the inbound connections for polls if they are few.
void publish_inbound(PollSet& s) {
  const size_t n = s.inbound_all.size();
  for (size_t i = 0; i < kReadDirectlyAtMost; ++i)
    s.inbound[i].store(i < n ? s.inbound_all[i] : -1, std::memory_order_relaxed);
  s.inbound_count.store(n, std::memory_order_release);
}

// This process's set, made on first use (caller holds the mutex). -1 if it cannot be.
int make_epfd(PollSet& s) {
  if (s.pid.load(std::memory_order_relaxed) == current_pid()) return s.epfd.load();
  const int inherited = s.epfd.load(std::memory_order_relaxed);
  if (inherited >= 0) close(inherited);  // the parent's: shared with it
  watched_for_polls.store(0, std::memory_order_relaxed);
  s.inbound_all.clear();
  publish_inbound(s);
  s.epfd.store(epoll_create1(EPOLL_CLOEXEC), std::memory_order_relaxed);
  s.pid.store(current_pid(), std::memory_order_release);
  return s.epfd.load(std::memory_order_relaxed);
}

}  // namespace

void watch_for_polls(int fd, bool is_link) {
  PollSet& s = poll_set();
  std::lock_guard lock(s.mutex);
  const int epfd = make_epfd(s);
  if (epfd < 0) return;
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.u64 = static_cast<uint32_t>(fd) | (is_link ? kLinkTag : 0);
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e) != 0) return;
  if (!is_link) {
    s.inbound_all.push_back(fd);
    publish_inbound(s);
  }
  watched_for_polls.fetch_add(1, std::memory_order_release);
}

void unwatch_for_polls(int fd) {
  PollSet& s = poll_set();
  std::lock_guard lock(s.mutex);
  const int epfd = current_epfd(s);
  if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr) != 0) return;
  watched_for_polls.fetch_sub(1, std::memory_order_relaxed);
  if (auto it = std::find(s.inbound_all.begin(), s.inbound_all.end(), fd);
      it != s.inbound_all.end()) {
    s.inbound_all.erase(it);
    publish_inbound(s);
  }
}

Arrivals arrivals_now(size_t watched) {
  PollSet& s = poll_set();
  const int epfd = current_epfd(s);
  Arrivals a;
  if (epfd < 0) return a;
  add_unlocked(looks_by_applications, 1);
  const size_t inbound = s.inbound_count.load(std::memory_order_acquire);
  if (watched <= kReadDirectlyAtMost && inbound <= kReadDirectlyAtMost) {
    a.responses = watched > inbound;
    for (size_t i = 0; i < inbound; ++i)
      if (const int fd = s.inbound[i].load(std::memory_order_relaxed); fd >= 0)
        a.request_fds[a.requests++] = fd;
    return a;
  }
  epoll_event events[Arrivals::kMost];
  const int n = epoll_wait(epfd, events, Arrivals::kMost, 0);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u64 & kLinkTag)
      a.responses = true;
    else
      a.request_fds[a.requests++] = static_cast<int>(events[i].data.u64 & 0xffffffffu);
  }
  return a;
}

}  // namespace softrdma::wire

#include "wire/arrivals.hpp"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/current_pid.hpp"
#include "wire/socket_io.hpp"

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
  // Under the mutex: every socket watched (with its tag), and whether the epoll set holds
  // them. It does only while polls use it: a socket in an epoll set costs each message that
  // arrives on it a callback on the sender's CPU, under the socket's lock.
  std::vector<epoll_event> all;
  bool in_epoll = false;
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

int fd_of(const epoll_event& e) {
  return static_cast<int>(e.data.u64 & 0xffffffffu);
}

// Caller holds the mutex. Lists the inbound connections for polls if they are few.
void publish_inbound(PollSet& s) {
  size_t n = 0;
  for (const epoll_event& e : s.all) {
    if (e.data.u64 & kLinkTag) continue;
    if (n < kReadDirectlyAtMost) s.inbound[n].store(fd_of(e), std::memory_order_relaxed);
    ++n;
  }
  for (size_t i = n; i < kReadDirectlyAtMost; ++i)
    s.inbound[i].store(-1, std::memory_order_relaxed);
  s.inbound_count.store(n, std::memory_order_release);
}

// Caller holds the mutex. Puts every socket into the epoll set or takes every one out, as
// polls will read them: directly while few (arrivals_now), through the set beyond.
// Sockets go in before the count that sends polls to the set grows past the few, and
// come out after it fell back.
void place_in_epoll(PollSet& s, int epfd, bool wanted) {
  if (wanted == s.in_epoll) return;
  for (epoll_event& e : s.all) {
    if (wanted)
      epoll_ctl(epfd, EPOLL_CTL_ADD, fd_of(e), &e);
    else
      epoll_ctl(epfd, EPOLL_CTL_DEL, fd_of(e), nullptr);
  }
  s.in_epoll = wanted;
}

// This process's set, made on first use (caller holds the mutex). -1 if it cannot be.
int make_epfd(PollSet& s) {
  if (s.pid.load(std::memory_order_relaxed) == current_pid()) return s.epfd.load();
  const int inherited = s.epfd.load(std::memory_order_relaxed);
  if (inherited >= 0) close(inherited);  // the parent's: shared with it
  watched_for_polls.store(0, std::memory_order_relaxed);
  s.all.clear();
  s.in_epoll = false;
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
  if (s.in_epoll && epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e) != 0) return;
  s.all.push_back(e);
  place_in_epoll(s, epfd, s.all.size() > kReadDirectlyAtMost);
  if (!is_link) publish_inbound(s);
  watched_for_polls.fetch_add(1, std::memory_order_release);
}

void unwatch_for_polls(int fd) {
  PollSet& s = poll_set();
  std::lock_guard lock(s.mutex);
  const int epfd = current_epfd(s);
  auto it = std::find_if(s.all.begin(), s.all.end(),
                         [fd](const epoll_event& e) { return fd_of(e) == fd; });
  if (epfd < 0 || it == s.all.end()) return;
  const bool inbound = !(it->data.u64 & kLinkTag);
  if (s.in_epoll) epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
  s.all.erase(it);
  watched_for_polls.fetch_sub(1, std::memory_order_relaxed);
  place_in_epoll(s, epfd, s.all.size() > kReadDirectlyAtMost);
  if (inbound) publish_inbound(s);
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
  const int n = ready_now(epfd, events, Arrivals::kMost);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u64 & kLinkTag)
      a.responses = true;
    else
      a.request_fds[a.requests++] = fd_of(events[i]);
  }
  return a;
}

}  // namespace softrdma::wire

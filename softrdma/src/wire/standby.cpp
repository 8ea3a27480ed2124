#include "wire/standby.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <mutex>
#include <vector>

#include "common/current_pid.hpp"
#include "wire/socket_io.hpp"

namespace softrdma::wire {
namespace {

// The threads standing by, for wake_all (never destroyed: application threads may arm a CQ
// while exit() runs). A forked child has none: its parent's threads did not come along.
struct StandingBy {
  std::mutex mutex;
  std::vector<Standby*> all;
  pid_t pid = 0;
};

StandingBy& standing_by_list() {
  static auto* list = new StandingBy;
  return *list;
}

timespec to_timespec(std::chrono::microseconds d) {
  return timespec{static_cast<time_t>(d.count() / 1000000),
                  static_cast<long>(d.count() % 1000000) * 1000};
}

}  // namespace

Standby::Standby() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

Standby::~Standby() {
  if (fd_ >= 0) close(fd_);
}

void Standby::signal() {
  if (fd_ < 0) return;
  stand_down_requested_.store(true, std::memory_order_relaxed);
  notify_eventfd(fd_);
}

void Standby::drain() {
  uint64_t count;
  while (read(fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
}

void Standby::stand_by(std::span<const int> arrivals,
                       const std::function<void()>& at_each_nap_end) {
  drain();
  if (!stand_down_requested_.exchange(false, std::memory_order_relaxed)) return;
  StandingBy& list = standing_by_list();
  {
    std::lock_guard lock(list.mutex);
    if (list.pid != current_pid()) {
      list.all.clear();
      list.pid = current_pid();
      threads_standing_by.store(0, std::memory_order_relaxed);
    }
    list.all.push_back(this);
    threads_standing_by.fetch_add(1, std::memory_order_release);
  }
  napping_.store(true, std::memory_order_relaxed);
  // No request while standing by (its write would end the nap): start_count_again() at the
  // end starts the count again.
  stand_down_at_.store(UINT64_MAX, std::memory_order_relaxed);
  // Only hang-ups and errors end a nap early: POLLRDHUP without POLLIN is not woken by
  // arriving data (an epoll descriptor, which reports only POLLIN, never ends one).
  pollfd watched[1 + kMostArrivals];
  pollfd waiting[kMostArrivals];
  const nfds_t count = std::min(arrivals.size(), kMostArrivals);
  watched[0] = {fd_, POLLIN, 0};
  for (nfds_t i = 0; i < count; ++i) {
    watched[1 + i] = {arrivals[i], POLLRDHUP, 0};
    waiting[i] = {arrivals[i], POLLIN, 0};
  }
  // Something found waiting as a nap ended with no take may have come just then: it has
  // waited a whole nap untaken only if it still waits after one more, short, nap without a
  // take. (Returning at the first sight sent the thread back in most naps of a two-way
  // stream, whose application posts for a while between its polls.)
  bool waited_at_last_end = false;
  for (auto nap = kFirstNap;;) {
    const uint64_t taken_before = took_.load(std::memory_order_relaxed);
    const timespec timeout = to_timespec(nap);
    if (ppoll(watched, 1 + count, &timeout, nullptr) != 0) break;  // woken, or a socket ended
    if (at_each_nap_end) at_each_nap_end();
    const bool took = took_.load(std::memory_order_relaxed) != taken_before;
    if (!took && poll(waiting, count, 0) != 0) {
      if (waited_at_last_end) break;  // nobody calls for it
      waited_at_last_end = true;
      nap = kFirstNap;
      continue;
    }
    waited_at_last_end = false;
    // Quiet for a longest nap: idle, and waiting on the sockets costs nothing then.
    if (!took && nap == kLongestNap) break;
    nap = std::min(nap * 2, kLongestNap);
  }
  napping_.store(false, std::memory_order_relaxed);
  {
    std::lock_guard lock(list.mutex);
    auto it = std::find(list.all.begin(), list.all.end(), this);
    if (it != list.all.end()) {
      list.all.erase(it);
      threads_standing_by.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  // A wake_all() that wrote to fd_ did so before the removal above; a request to stand by
  // made as this one began is stale.
  drain();
  stand_down_requested_.store(false, std::memory_order_relaxed);
  start_count_again();
}

void Standby::wake_all_now() {
  StandingBy& list = standing_by_list();
  std::lock_guard lock(list.mutex);
  if (list.pid != current_pid()) return;
  for (Standby* s : list.all) notify_eventfd(s->fd_);
}

}  // namespace softrdma::wire

// Keeps a socket-serving background thread (a link's reader, the responder loop) from being
// woken for arrivals that application threads take themselves. An application that
// busy-polls a CQ, or posts, reads the sockets in its own calls; the kernel still wakes the
// background thread asleep on them for every message, and on two cores that wake-up
// preempts the application: `ib_send_lat` across two hosts took 45-56 µs with the wake-ups
// and 15 without.
//
// So the thread stands by once applications have taken kStandDownAfter arrivals in a row,
// or once it served an arrival after their calls had looked at the sockets
// kStandDownAfterLooks times since its last serve (they were at it, and the thread, woken
// by the kernel, only won the race: in a two-way stream it would win most of them). It naps
// on a timer instead of on the sockets, for longer and longer (up to kLongestNap) while
// they keep taking arrivals, and waits on the sockets again (serving what waits) as soon as
// something waited a whole nap untaken (they went to spin on memory, or stopped calling),
// after a quiet longest nap (idle: waiting on the sockets costs nothing), or when an
// application arms a CQ (it is about to sleep until an event).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>

#include "common/unlocked_count.hpp"
#include "wire/arrivals.hpp"

namespace softrdma::wire {

class Standby {
 public:
  /// Arrivals applications take in a row (none served by the thread in between) after which
  /// the thread stands by.
  static constexpr uint64_t kStandDownAfter = 8;
  /// Looks by applications' calls at the sockets (looks_by_applications) between two serves
  /// of the thread after which it stands by: about 128 polls or posts.
  static constexpr uint64_t kStandDownAfterLooks = 16;
  static constexpr std::chrono::microseconds kFirstNap{50};
  /// What waits for a poller that stopped without arming a CQ waits at most this long.
  static constexpr std::chrono::microseconds kLongestNap{1000};
  static_assert(kFirstNap > std::chrono::microseconds{0} && kFirstNap <= kLongestNap);

  Standby();
  ~Standby();
  Standby(const Standby&) = delete;
  Standby& operator=(const Standby&) = delete;

  /// The descriptor the background thread waits on beside its sockets: readable when it
  /// should stand by. -1 if none could be made (the thread then never stands by).
  int fd() const { return fd_; }

  /// An application thread took arrivals itself. A relaxed add, and one write to fd() when
  /// it is the kStandDownAfter-th in a row.
  void application_took() {
    add_unlocked(taken_by_applications_, 1);
    if (took_.fetch_add(1, std::memory_order_relaxed) + 1 ==
        stand_down_at_.load(std::memory_order_relaxed))
      signal();
  }

  /// The background thread served arrivals itself: it stands by if applications' calls
  /// looked at the sockets kStandDownAfterLooks times since its last serve; otherwise the
  /// count of their takes in a row starts again. Called by the thread only.
  void thread_took() {
    add_unlocked(taken_by_threads_, 1);
    const uint64_t looks = looks_by_applications.load(std::memory_order_relaxed);
    const bool applications_look = looks - looks_at_last_serve_ >= kStandDownAfterLooks;
    looks_at_last_serve_ = looks;
    if (applications_look)
      signal();
    else
      start_count_again();
  }

  /// Reads of the sockets that took arrivals, in this process: by applications' calls and by
  /// the library's threads (for the debug log at exit).
  struct Totals {
    uint64_t by_applications;
    uint64_t by_threads;
  };
  static Totals totals() {
    return {taken_by_applications_.load(std::memory_order_relaxed),
            taken_by_threads_.load(std::memory_order_relaxed)};
  }

  /// The background thread, when fd() was readable: naps while applications take what
  /// arrives, and returns once something waited on one of `arrivals` (sockets, or epoll
  /// descriptors of sockets) a whole nap untaken, after a longest nap in which nothing
  /// arrived, when an application arms a CQ, or when a socket hangs up or fails. The thread
  /// then serves what waits and waits on its sockets again. The first kMostArrivals count.
  /// `at_each_nap_end` runs as each nap ends.
  static constexpr size_t kMostArrivals = 8;
  void stand_by(std::span<const int> arrivals, const std::function<void()>& at_each_nap_end = {});

  /// The thread stands by (applications poll).
  bool standing_by() const { return napping_.load(std::memory_order_relaxed); }

  /// An application is about to wait for a completion event: every thread standing by
  /// waits on its sockets again. Cheap when none does.
  static void wake_all() {
    if (threads_standing_by.load(std::memory_order_acquire) != 0) wake_all_now();
  }

 private:
  void signal();
  void drain();
  void start_count_again() {
    stand_down_at_.store(took_.load(std::memory_order_relaxed) + kStandDownAfter,
                         std::memory_order_relaxed);
  }
  static void wake_all_now();
  static inline std::atomic<int> threads_standing_by{0};

  int fd_;
  std::atomic<bool> napping_{false};
  std::atomic<uint64_t> took_{0};  // by applications, ever
  std::atomic<uint64_t> stand_down_at_{kStandDownAfter};
  uint64_t looks_at_last_serve_ = 0;  // the thread's own
  static inline std::atomic<uint64_t> taken_by_applications_{0};
  static inline std::atomic<uint64_t> taken_by_threads_{0};
  // fd() was written by application_took(), not by wake_all().
  std::atomic<bool> stand_down_requested_{false};
};

}  // namespace softrdma::wire

// A mutual-exclusion lock that lives in shared memory and is usable by several processes.
//
// The all-zero state is "unlocked", so locks in freshly created (zero-filled) shared files
// need no initialisation. The word holds the owner's pid; a waiter that finds the owner
// process gone takes the lock over, so a process killed inside a critical section does not
// wedge the host. Waiters sleep on a futex, never spin for long.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/current_pid.hpp"

namespace softrdma {

class ProcessLock {
 public:
  /// Inline: the uncontended lock is on every completion's path.
  void lock() {
    if (!try_lock()) lock_slow();
  }
  bool try_lock() {
    uint32_t expected = 0;
    return word_.compare_exchange_strong(expected, static_cast<uint32_t>(current_pid()),
                                         std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() {
    if (word_.exchange(0, std::memory_order_release) & kWaitersBit) wake_one();
  }

 private:
  static constexpr uint32_t kWaitersBit = 0x80000000u;
  void lock_slow();
  void wake_one();
  std::atomic<uint32_t> word_{0};
};
static_assert(sizeof(ProcessLock) == 4, "ProcessLock is embedded in shared-memory layouts");

class ProcessLockGuard {
 public:
  explicit ProcessLockGuard(ProcessLock& l) : lock_(l) { lock_.lock(); }
  ~ProcessLockGuard() { lock_.unlock(); }
  ProcessLockGuard(const ProcessLockGuard&) = delete;
  ProcessLockGuard& operator=(const ProcessLockGuard&) = delete;

 private:
  ProcessLock& lock_;
};

}  // namespace softrdma

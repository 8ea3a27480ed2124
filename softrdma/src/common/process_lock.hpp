// A mutual-exclusion lock that lives in shared memory and is usable by several processes.
//
// The all-zero state is "unlocked", so locks in freshly created (zero-filled) shared files
// need no initialisation. The word holds the owner's pid; a waiter that finds the owner
// process gone takes the lock over, so a process killed inside a critical section does not
// wedge the host. Waiters sleep on a futex, never spin for long.
//
// Unlocking is a plain store followed by a look at the waiters' count; the waiter makes
// that safe with a heavy fence (common/asymmetric_fence.hpp) after counting itself, so an
// uncontended lock and unlock cost one locked instruction, not two.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/asymmetric_fence.hpp"
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
    store_then_fence(word_, 0u);
    // A waiter counts itself, fences, then looks at the word: it sees this release, or this
    // load sees it counted.
    if (waiters_.load(std::memory_order_seq_cst) != 0) wake_one();
  }

 private:
  void lock_slow();
  void wake_one();
  std::atomic<uint32_t> word_{0};     // the owner's pid; 0 when free
  std::atomic<uint32_t> waiters_{0};  // threads past spinning, asleep or about to be
};
static_assert(sizeof(ProcessLock) == 8, "ProcessLock is embedded in shared-memory layouts");

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

// A mutual-exclusion lock that lives in shared memory and is usable by several processes.
//
// The all-zero state is "unlocked", so locks in freshly created (zero-filled) shared files
// need no initialisation. The word holds the owner's pid; a waiter that finds the owner
// process gone takes the lock over, so a process killed inside a critical section does not
// wedge the host. Waiters sleep on a futex, never spin for long.
//
// Unlocking is a sequentially consistent store followed by a look at the waiters' count, and
// a waiter counts itself before it looks at the word (Dekker's pattern, full fences on both
// sides): one of the two sees the other. A waiter used to make a heavy fence instead
// (membarrier(2)), sparing the unlock its locked instruction, but a lock that is contended
// at all is contended often (a QP's send queue, posted to by the application and completed
// by the threads reading answers), and that fence interrupts every CPU of the host each time.
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
    word_.store(0, std::memory_order_seq_cst);
    // A waiter counts itself, then looks at the word: it sees this store, or this load sees
    // it counted.
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

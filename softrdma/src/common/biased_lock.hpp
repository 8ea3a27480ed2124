// A lock of one process that costs no locked instruction while a single thread uses it, the
// common case of a QP that one thread posts to and a CQ that one thread polls (NIC drivers
// offer the same through a "single-threaded" flag the application must set; this needs none).
//
// The first thread to take it becomes its owner and takes it by saying it is inside (a
// store and a light fence, common/asymmetric_fence.hpp; without membarrier there are no
// owners). The first other thread to want it revokes that for good: it says so, fences
// heavily, waits until the owner is outside, and from then on every thread, the owner too,
// takes a ProcessLock.
#pragma once

#include <atomic>

#include "common/asymmetric_fence.hpp"
#include "common/process_lock.hpp"

namespace softrdma {

class BiasedLock {
 public:
  /// Takes the lock; true if as its owner (pass it to unlock). Inline: taken on every post
  /// and every poll.
  [[nodiscard]] bool lock() {
    if (owner_.load(std::memory_order_relaxed) == self()) [[likely]] {
      if (enter_as_owner()) return true;
    }
    return lock_slow();
  }
  void unlock(bool as_owner) {
    if (as_owner)
      owner_inside_.store(false, std::memory_order_release);
    else
      shared_.unlock();
  }

  /// Holds the lock for a scope.
  class Guard {
   public:
    explicit Guard(BiasedLock& l) : lock_(l), as_owner_(l.lock()) {}
    ~Guard() { lock_.unlock(as_owner_); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    BiasedLock& lock_;
    bool as_owner_;
  };

 private:
  // Identifies the calling thread with one instruction (its thread control block).
  static const void* self() { return __builtin_thread_pointer(); }
  // Only a thread of a process with light fences becomes the owner (lock_slow).
  bool enter_as_owner() {
    owner_inside_.store(true, std::memory_order_relaxed);
    light_fence();  // pairs with the revoker's heavy fence
    if (!revoked_.load(std::memory_order_relaxed)) [[likely]]
      return true;
    owner_inside_.store(false, std::memory_order_release);
    return false;
  }
  bool lock_slow();  // as lock()

  std::atomic<const void*> owner_{nullptr};  // the thread it is biased to, if any
  std::atomic<bool> owner_inside_{false};
  std::atomic<bool> revoked_{false};  // set once, never cleared
  ProcessLock shared_;                // everyone's lock once the bias is revoked
};

}  // namespace softrdma

// A lock of one process that costs no locked instruction while a single thread uses it, the
// common case of a QP that one thread posts to and a CQ that one thread polls (NIC drivers
// offer the same through a "single-threaded" flag the application must set; this needs none).
//
// The first thread to take it becomes its owner and takes it by saying it is inside (a
// store and a light fence, common/asymmetric_fence.hpp). The first other thread to want it
// revokes that for good: it says so, fences heavily, waits until the owner is outside, and
// from then on every thread, the owner too, takes a ProcessLock.
#pragma once

#include <atomic>

#include "common/asymmetric_fence.hpp"
#include "common/process_lock.hpp"

namespace softrdma {

class BiasedLock {
 public:
  /// Inline: taken on every post and every poll.
  void lock() {
    if (owner_.load(std::memory_order_relaxed) == self()) [[likely]] {
      if (enter_as_owner()) return;
    }
    lock_slow();
  }
  void unlock() {
    // Only the owner can be inside as the owner, and it stays the owner while inside.
    if (owner_inside_.load(std::memory_order_relaxed) &&
        owner_.load(std::memory_order_relaxed) == self())
      owner_inside_.store(false, std::memory_order_release);
    else
      shared_.unlock();
  }

 private:
  // Identifies the calling thread with one instruction (its thread control block).
  static const void* self() { return __builtin_thread_pointer(); }
  bool enter_as_owner() {
    if (light_fences()) [[likely]] {
      owner_inside_.store(true, std::memory_order_relaxed);
      light_fence();  // pairs with the revoker's heavy fence
    } else {
      owner_inside_.exchange(true, std::memory_order_seq_cst);
    }
    if (!revoked_.load(std::memory_order_seq_cst)) [[likely]]
      return true;
    owner_inside_.store(false, std::memory_order_release);
    return false;
  }
  void lock_slow();

  std::atomic<const void*> owner_{nullptr};  // the thread it is biased to, if any
  std::atomic<bool> owner_inside_{false};
  std::atomic<bool> revoked_{false};  // set once, never cleared
  ProcessLock shared_;                // everyone's lock once the bias is revoked
};

}  // namespace softrdma

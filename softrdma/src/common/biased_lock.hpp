// A lock that costs no locked instruction while a single thread uses it, the common case of
// a QP that one thread posts to, a CQ that one thread polls, and a receive queue or a CQ
// that one peer delivers into (NIC drivers offer the first two through a "single-threaded"
// flag the application must set; this needs none). SharedBiasedLock may live in shared
// memory (all zero is a free lock, no owner yet) and be wanted by threads of several
// processes; BiasedLock, of one process, spares its owner the check of the pid.
//
// The first thread to take it becomes its owner and takes it by saying it is inside (a
// store and a light fence, common/asymmetric_fence.hpp; without membarrier there are no
// owners). The first other thread to want it, of any process, revokes that for good: it says
// so, fences heavily (which reaches every registered process), waits until the owner is
// outside or its process is gone, and from then on every thread, the owner too, takes a
// ProcessLock.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/asymmetric_fence.hpp"
#include "common/current_pid.hpp"
#include "common/process_lock.hpp"

namespace softrdma {

template <bool kAcrossProcesses>
class BasicBiasedLock {
 public:
  /// Takes the lock; true if as its owner (pass it to unlock). Inline: taken on every post
  /// and every poll.
  [[nodiscard]] bool lock() {
    if (owner_thread_.load(std::memory_order_relaxed) == this_thread() &&
        (!kAcrossProcesses || owner_pid_.load(std::memory_order_relaxed) ==
                                  static_cast<uint32_t>(current_pid()))) [[likely]] {
      if (enter_as_owner()) return true;
    }
    return lock_slow();
  }
  void unlock(bool as_owner) {
    if (as_owner)
      owner_inside_.store(0, std::memory_order_release);
    else
      shared_.unlock();
  }

  /// Holds the lock for a scope.
  class Guard {
   public:
    explicit Guard(BasicBiasedLock& l) : lock_(l), as_owner_(l.lock()) {}
    ~Guard() { lock_.unlock(as_owner_); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    BasicBiasedLock& lock_;
    bool as_owner_;
  };

 private:
  // A thread is its thread control block's address (one instruction; unique among the
  // process's live threads), and across processes also its pid: a forked child's thread
  // has its parent's address.
  static uintptr_t this_thread() { return reinterpret_cast<uintptr_t>(__builtin_thread_pointer()); }
  // Only a thread of a process with light fences becomes the owner (lock_slow).
  bool enter_as_owner() {
    owner_inside_.store(1, std::memory_order_relaxed);
    light_fence();  // pairs with the revoker's heavy fence
    if (!revoked_.load(std::memory_order_relaxed)) [[likely]]
      return true;
    owner_inside_.store(0, std::memory_order_release);
    return false;
  }
  bool lock_slow();  // as lock()

  // The owner, if any: its thread, then (under the claim) its pid, set once.
  std::atomic<uintptr_t> owner_thread_{0};
  std::atomic<uint32_t> owner_pid_{0};
  std::atomic<uint32_t> owner_inside_{0};
  std::atomic<uint32_t> revoked_{0};  // set once, never cleared
  ProcessLock shared_;                // everyone's lock once the bias is revoked
};

using BiasedLock = BasicBiasedLock<false>;
using SharedBiasedLock = BasicBiasedLock<true>;
static_assert(sizeof(SharedBiasedLock) == 32, "embedded in shared-memory layouts");

}  // namespace softrdma

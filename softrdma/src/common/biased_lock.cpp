#include "common/biased_lock.hpp"

#include <thread>

namespace softrdma {

template <bool kAcrossProcesses>
bool BasicBiasedLock<kAcrossProcesses>::lock_slow() {
  if (light_fences() && !revoked_.load(std::memory_order_acquire)) {
    // The first thread to want it claims it; the pid is written before the thread can be
    // seen as the owner by itself, and another thread of this process that sees the claim
    // half-written takes it for someone else's, which it is.
    uint32_t unclaimed = 0;
    if (owner_pid_.compare_exchange_strong(unclaimed, static_cast<uint32_t>(current_pid()),
                                           std::memory_order_acq_rel)) {
      owner_thread_.store(this_thread(), std::memory_order_relaxed);
      if (enter_as_owner()) return true;
    }
  }
  shared_.lock();
  if (revoked_.load(std::memory_order_relaxed)) return false;
  // The first other thread (under shared_, so only one): revokes the bias for good.
  revoked_.store(1, std::memory_order_seq_cst);
  heavy_fence();  // pairs with the owner's light fence in enter_as_owner
  const uint32_t owner_pid = owner_pid_.load(std::memory_order_relaxed);
  for (int spins = 0; owner_inside_.load(std::memory_order_seq_cst); ++spins) {
    if (spins < 100) {
      __builtin_ia32_pause();
    } else {
      // The owner was preempted inside: let it finish, unless its process died there
      // (a process killed inside a ProcessLock's section is taken over the same way), or
      // exited and is a zombie not yet reaped (perhaps by this very thread): asked of /proc
      // now and then.
      const auto pid = static_cast<pid_t>(owner_pid);
      if (owner_pid != 0 && (spins % 1024 == 0 ? pid_exited(pid) : pid_gone(pid))) break;
      std::this_thread::yield();
    }
  }
  return false;
}

template class BasicBiasedLock<false>;
template class BasicBiasedLock<true>;

}  // namespace softrdma

#include "common/biased_lock.hpp"

#include <thread>

namespace softrdma {

bool BiasedLock::lock_slow() {
  if (light_fences() && !revoked_.load(std::memory_order_acquire)) {
    const void* none = nullptr;
    if (owner_.compare_exchange_strong(none, self(), std::memory_order_acq_rel) && enter_as_owner())
      return true;  // the first thread to want it
  }
  shared_.lock();
  if (revoked_.load(std::memory_order_relaxed)) return false;
  // The first other thread (under shared_, so only one): revokes the bias for good.
  revoked_.store(true, std::memory_order_seq_cst);
  heavy_fence();  // pairs with the owner's light fence in enter_as_owner
  for (int spins = 0; owner_inside_.load(std::memory_order_seq_cst); ++spins) {
    if (spins < 100)
      __builtin_ia32_pause();
    else
      std::this_thread::yield();  // the owner was preempted inside: let it finish
  }
  owner_.store(nullptr, std::memory_order_relaxed);
  return false;
}

}  // namespace softrdma

#include "common/process_lock.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <ctime>

namespace softrdma {
namespace {

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  // Bounded sleep: the owner may die without waking anyone; we re-check its liveness.
  timespec timeout{0, 2'000'000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &timeout, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

bool owner_gone(uint32_t owner_pid) {
  return owner_pid != 0 && kill(static_cast<pid_t>(owner_pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

void ProcessLock::lock_slow() {
  const uint32_t me = static_cast<uint32_t>(current_pid());
  bool slept = false;
  for (int spins = 0;; ++spins) {
    uint32_t seen = word_.load(std::memory_order_relaxed);
    // Keep (or, after sleeping, restore) the waiters bit: others may still sleep on the word.
    const uint32_t waiters = slept ? kWaitersBit : (seen & kWaitersBit);
    if ((seen & ~kWaitersBit) == 0) {
      if (word_.compare_exchange_weak(seen, me | waiters, std::memory_order_acquire,
                                      std::memory_order_relaxed))
        return;
      continue;
    }
    if (spins < 64) {
      __builtin_ia32_pause();
      continue;
    }
    if (owner_gone(seen & ~kWaitersBit)) {
      if (word_.compare_exchange_strong(seen, me | waiters, std::memory_order_acquire,
                                        std::memory_order_relaxed))
        return;
      continue;
    }
    if (!(seen & kWaitersBit) &&
        !word_.compare_exchange_weak(seen, seen | kWaitersBit, std::memory_order_relaxed))
      continue;
    futex_wait(&word_, seen | kWaitersBit);
    slept = true;
  }
}

void ProcessLock::wake_one() {
  futex_wake(&word_);
}

}  // namespace softrdma

#include "common/process_lock.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cerrno>
#include <ctime>

namespace softrdma {
namespace {

// True when it slept its whole bound: the owner held on for that long.
bool futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  // Bounded sleep: the owner may die without waking anyone; we re-check its liveness.
  timespec timeout{0, 2'000'000};
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &timeout,
                 nullptr, 0) != 0 &&
         errno == ETIMEDOUT;
}

void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// The owner died. After it held on for a whole sleep, /proc is asked too: a zombie (an owner
// killed inside, not yet reaped, perhaps by this very waiter) holds nothing any more.
bool owner_gone(uint32_t owner_pid, bool held_on) {
  if (owner_pid == 0) return false;
  const auto pid = static_cast<pid_t>(owner_pid);
  return held_on ? pid_exited(pid) : pid_gone(pid);
}

}  // namespace

void ProcessLock::lock_slow() {
  const uint32_t me = static_cast<uint32_t>(current_pid());
  // Taken over from an owner that died, or freed: the word's value is all that is compared.
  auto take = [&](uint32_t seen) {
    return word_.compare_exchange_strong(seen, me, std::memory_order_acquire,
                                         std::memory_order_relaxed);
  };
  for (int spins = 0; spins < 64; ++spins) {
    const uint32_t seen = word_.load(std::memory_order_relaxed);
    if (seen == 0 && take(0)) return;
    __builtin_ia32_pause();
  }
  waiters_.fetch_add(1, std::memory_order_seq_cst);  // before the word is looked at (unlock)
  for (bool held_on = false;;) {
    const uint32_t seen = word_.load(std::memory_order_seq_cst);
    if ((seen == 0 || owner_gone(seen, held_on)) && take(seen)) break;
    held_on = seen != 0 && futex_wait(&word_, seen);
  }
  waiters_.fetch_sub(1, std::memory_order_relaxed);
}

void ProcessLock::wake_one() {
  futex_wake(&word_);
}

}  // namespace softrdma

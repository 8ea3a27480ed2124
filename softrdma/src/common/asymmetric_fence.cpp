#include "common/asymmetric_fence.hpp"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/env_switch.hpp"

namespace softrdma {
namespace detail {

std::atomic<bool> g_light_fences{false};

namespace {

long membarrier(int command) {
  return syscall(SYS_membarrier, command, 0, 0);
}

// SOFTRDMA_MEMBARRIER=0 leaves the process unregistered, as a sandbox that refuses the
// call would: the fallback (locked instructions on the common side) is then what runs.
void register_process() {
  const bool refused = switched_off("SOFTRDMA_MEMBARRIER");
  g_light_fences.store(!refused && membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0,
                       std::memory_order_relaxed);
}

[[gnu::constructor]] void at_load() {
  register_process();
  pthread_atfork(nullptr, nullptr, register_process);
}

}  // namespace
}  // namespace detail

void heavy_fence() {
  // The expedited command reaches the registered processes, which are the only ones using
  // light fences. Where it is refused, the slower global command reaches every process.
  // Where both are refused, so was the registration: every side then uses sequentially
  // consistent atomics, which need no fence here.
  if (detail::membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0)
    detail::membarrier(MEMBARRIER_CMD_GLOBAL);
}

}  // namespace softrdma

// Asymmetric fences. A thread that stores one word and then loads another, while some other
// thread does the same the other way round (Dekker's pattern: announce, then check), needs
// a full fence between the two on both sides, a locked instruction of about 6 ns here. When
// one side is rare (deregistering a region, a lock's waiter going to sleep), membarrier(2)
// lets the rare side make every thread of every registered process pass a full barrier, and
// the common side needs only a compiler barrier.
#pragma once

#include <atomic>

namespace softrdma {

namespace detail {
/// This process is registered for membarrier's global expedited command (set when the
/// library is loaded, and again in every fork()ed child, which starts unregistered).
extern std::atomic<bool> g_light_fences;
}  // namespace detail

/// True when light_fence() is enough: any process's heavy_fence() makes it whole. When
/// false (a kernel or sandbox without membarrier) the common side must use a locked
/// instruction instead, as it would without this file.
inline bool light_fences() {
  return detail::g_light_fences.load(std::memory_order_relaxed);
}

/// The common side, when light_fences(): keeps the compiler from moving this thread's later
/// loads above its earlier stores. The CPU may still do so until a heavy_fence() runs.
inline void light_fence() {
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

/// The common side in full: stores `value` into `word` (a release) so that this thread's
/// later loads come after it, with a light fence where that is enough and otherwise as a
/// sequentially consistent exchange.
template <class T>
inline void store_then_fence(std::atomic<T>& word, T value) {
  if (light_fences()) [[likely]] {
    word.store(value, std::memory_order_release);
    light_fence();
  } else {
    word.exchange(value, std::memory_order_seq_cst);
  }
}

/// The rare side: every thread on the host that passed a light_fence() has its stores before
/// that point visible, and its loads after it not yet made, as seen from this thread's loads
/// after this call. A system call of about a microsecond.
void heavy_fence();

}  // namespace softrdma

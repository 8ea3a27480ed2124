// Counts bumped on hot paths without a locked instruction (one costs about 6 ns here): a
// load and a store. Two threads bumping at once may lose one of the increments, so this is
// for counts whose writers are serialised by a lock they already hold, or for which a lost
// increment only costs a late look or a statistic one short.
#pragma once

#include <atomic>
#include <cstdint>

namespace softrdma {

inline void add_unlocked(std::atomic<uint64_t>& count, uint64_t n,
                         std::memory_order order = std::memory_order_relaxed) {
  count.store(count.load(std::memory_order_relaxed) + n, order);
}

}  // namespace softrdma

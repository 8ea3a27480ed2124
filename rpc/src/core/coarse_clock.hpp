// The engine's clock: steady_clock read again only when the CPU's cycle counter says some
// microseconds have passed since the last read. On this kind of VM a steady_clock read costs
// tens of nanoseconds, as much as a whole in-process call; timeouts and liveness need
// microseconds, not nanoseconds.
#pragma once

#include <cstdint>

#include "rdmakit/rpc/options.hpp"

namespace rdmakit::rpc::detail {

class CoarseClock {
 public:
  Clock::time_point now() noexcept {
#if defined(__x86_64__)
    const uint64_t tsc = __builtin_ia32_rdtsc();
    if (tsc - last_tsc_ < kStaleCycles) return last_;
    last_tsc_ = tsc;
#else
    if (++reads_ % 16 != 0) return last_;
#endif
    last_ = Clock::now();
    return last_;
  }
  /// Reads the clock now.
  Clock::time_point refresh() noexcept {
#if defined(__x86_64__)
    last_tsc_ = __builtin_ia32_rdtsc();
#endif
    last_ = Clock::now();
    return last_;
  }

 private:
  // About 10 microseconds at 3 GHz, 30 at 1 GHz.
  static constexpr uint64_t kStaleCycles = 1u << 15;
  Clock::time_point last_{};
#if defined(__x86_64__)
  uint64_t last_tsc_ = 0;
#else
  uint32_t reads_ = 0;
#endif
};

}  // namespace rdmakit::rpc::detail

#include "common/log.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace softrdma {

bool debug_enabled() {
  static const bool enabled = std::getenv("SOFTRDMA_DEBUG") != nullptr;
  return enabled;
}

bool notice_due(std::atomic<int64_t>& last, std::atomic<uint64_t>& suppressed) {
  constexpr int64_t kEverySeconds = 10;
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t seen = last.load(std::memory_order_relaxed);
  if ((seen == INT64_MIN || now - seen >= kEverySeconds) &&
      last.compare_exchange_strong(seen, now, std::memory_order_relaxed))
    return true;
  suppressed.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void end_notice(std::atomic<uint64_t>& suppressed) {
  if (const uint64_t more = suppressed.exchange(0, std::memory_order_relaxed))
    std::fprintf(stderr, " (and %llu more like it)", static_cast<unsigned long long>(more));
  std::fputc('\n', stderr);
}

}  // namespace softrdma

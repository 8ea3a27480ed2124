// Diagnostics for softrdma: debug lines, off unless SOFTRDMA_DEBUG is set in the environment,
// and notices of what a user must know (traffic refused as hostile, a port another user
// holds), always on but at most one line per place every 10 s, so that a flood of forged
// requests cannot flood the application's stderr.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>

namespace softrdma {

bool debug_enabled();

#define SOFTRDMA_DEBUG_LOG(...)                       \
  do {                                                \
    if (::softrdma::debug_enabled()) {                \
      std::fprintf(stderr, "softrdma: " __VA_ARGS__); \
      std::fputc('\n', stderr);                       \
    }                                                 \
  } while (0)

/// Whether a notice from the place that owns `last` may print now (10 s since its last one);
/// `suppressed` counts those that did not.
bool notice_due(std::atomic<int64_t>& last, std::atomic<uint64_t>& suppressed);
/// Ends a notice's line, saying how many like it were suppressed since the last.
void end_notice(std::atomic<uint64_t>& suppressed);

#define SOFTRDMA_NOTICE(...)                                        \
  do {                                                              \
    static std::atomic<int64_t> notice_last_{INT64_MIN};            \
    static std::atomic<uint64_t> notice_suppressed_{0};             \
    if (::softrdma::notice_due(notice_last_, notice_suppressed_)) { \
      std::fprintf(stderr, "softrdma: " __VA_ARGS__);               \
      ::softrdma::end_notice(notice_suppressed_);                   \
    }                                                               \
  } while (0)

}  // namespace softrdma

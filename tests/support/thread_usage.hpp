// What this process's threads have cost so far, from /proc/self/task: how often the
// library's threads woke, and the CPU they used.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace rdmakit::testing {

struct ThreadUsage {
  uint64_t wakeups = 0;    // voluntary context switches: sleeps woken from
  uint64_t cpu_ticks = 0;  // user and system time, in clock ticks
};

/// The sum over this process's threads whose name begins with `prefix`; nothing if none does.
std::optional<ThreadUsage> usage_of_threads(std::string_view prefix);

}  // namespace rdmakit::testing

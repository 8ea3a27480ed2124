// Failures of the benchmark, and the deadline that bounds every wait.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rdmakit::tool {

// A run that cannot go on; the message says what happened.
class PerfError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Expires when nothing progressed for `limit`. Busy loops call check() on every round: it
// reads the clock only once in a while, so it costs nothing measurable.
class Deadline {
 public:
  explicit Deadline(std::chrono::seconds limit)
      : limit_(limit), until_(std::chrono::steady_clock::now() + limit) {}

  void progress() noexcept { moved_ = true; }
  // Throws PerfError naming `what` once `limit` passed without progress.
  void check(std::string_view what) {
    if (++calls_ % 1024 != 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (moved_) {
      moved_ = false;
      until_ = now + limit_;
    } else if (now > until_) {
      throw PerfError("timed out: nothing happened for " + std::to_string(limit_.count()) +
                      " s while waiting for " + std::string(what));
    }
  }

 private:
  std::chrono::seconds limit_;
  std::chrono::steady_clock::time_point until_;
  uint64_t calls_ = 0;
  bool moved_ = false;
};

}  // namespace rdmakit::tool

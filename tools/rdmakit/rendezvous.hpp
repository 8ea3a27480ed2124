// The client's threads meet between the steps of each size (start together, then combine
// their measurements). Bounded, and released at once when one of them fails.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

namespace rdmakit::tool {

class Rendezvous {
 public:
  explicit Rendezvous(size_t parties) : parties_(parties) {}

  // Waits until every party arrived; the last one runs `last` before anyone leaves. Throws
  // PerfError when another party failed or `limit` passed.
  void arrive(const std::function<void()>& last, std::chrono::seconds limit);
  // This party will not come: the others stop waiting.
  void fail();

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  size_t parties_;
  size_t arrived_ = 0;
  uint64_t round_ = 0;
  bool failed_ = false;
};

}  // namespace rdmakit::tool

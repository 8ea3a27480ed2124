#include "rendezvous.hpp"

#include "bounded.hpp"

namespace rdmakit::tool {

void Rendezvous::arrive(const std::function<void()>& last, std::chrono::seconds limit) {
  std::unique_lock lock(mutex_);
  if (failed_) throw PerfError("another thread failed");
  if (++arrived_ == parties_) {
    try {
      if (last) last();
    } catch (...) {
      failed_ = true;
      changed_.notify_all();
      throw;
    }
    arrived_ = 0;
    ++round_;
    changed_.notify_all();
    return;
  }
  const uint64_t round = round_;
  if (!changed_.wait_for(lock, limit, [&] { return failed_ || round_ != round; }))
    throw PerfError("timed out waiting for the other threads");
  if (failed_) throw PerfError("another thread failed");
}

void Rendezvous::fail() {
  std::lock_guard lock(mutex_);
  failed_ = true;
  changed_.notify_all();
}

}  // namespace rdmakit::tool

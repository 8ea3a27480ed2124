// An endpoint's wake-up for transports without a descriptor per session (inproc): an
// eventfd that peers write when they find the endpoint asleep, and a ready set in which a
// peer marks the session it just published frames to, so the endpoint visits only those
// sessions instead of scanning every idle one. Shared, so that a peer may outlive the
// endpoint without touching freed memory or a closed (or reused) descriptor.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

namespace rdmakit::rpc::detail {

class Doorbell {
 public:
  Doorbell();
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  void ring() noexcept;
  /// Consumes pending rings (non-blocking).
  void clear() noexcept;
  int fd() const noexcept { return fd_; }

  /// Sessions with an index below this can be marked ready; others are scanned.
  static constexpr uint32_t kReadySessions = 4096;
  static constexpr size_t kReadyWords = kReadySessions / 64;
  static_assert(kReadySessions % 64 == 0, "whole words of ready bits");

  /// The endpoint reads the ready set (it has many sessions that can be marked); with few it
  /// scans them, and peers skip marking, which costs a read-modify-write on a shared line.
  bool wants_marks() const noexcept { return wants_marks_.load(std::memory_order_relaxed); }
  void set_wants_marks(bool wants) noexcept {
    wants_marks_.store(wants, std::memory_order_relaxed);
  }

  /// Session `index` has frames to receive. Sequentially consistent, like the publishing
  /// store before it and the take below: a mark is never lost between a take and a look.
  void mark_ready(uint32_t index) noexcept {
    if (index >= kReadySessions) return;
    std::atomic<uint64_t>& word = ready_[index / 64];
    const uint64_t bit = uint64_t{1} << (index % 64);
    if ((word.load(std::memory_order_seq_cst) & bit) == 0)
      word.fetch_or(bit, std::memory_order_seq_cst);
  }
  /// The sessions of word `w` marked since the last take; clears them.
  uint64_t take_ready(size_t w) noexcept {
    return ready_[w].load(std::memory_order_relaxed) == 0
               ? 0
               : ready_[w].exchange(0, std::memory_order_seq_cst);
  }

 private:
  int fd_;
  std::array<std::atomic<uint64_t>, kReadyWords> ready_{};
  std::atomic<bool> wants_marks_{false};
};

}  // namespace rdmakit::rpc::detail

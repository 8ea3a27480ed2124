// Registered buffers for out-of-line payloads, kept for reuse: registering and mapping a
// fresh region per large message (and faulting its pages in) cost more than the RDMA READ
// that moves it. Buffers come in power-of-two size classes; a bounded number of free ones
// is kept per class, the rest are unmapped.
#pragma once

#include <array>
#include <cstddef>
#include <system_error>

#include "rdmakit/allocator.hpp"

namespace rdmakit::rpc::detail::rc {

class PayloadPool {
 public:
  /// Buffers registered with `access` in `pd`, which must outlive the pool.
  PayloadPool(const ProtectionDomain& pd, Access access) : pd_(&pd), access_(access) {}

  /// A buffer of at least `bytes`; empty with `error` set when registration fails.
  RawRegion take(size_t bytes, std::error_code& error);
  /// Gives a buffer back (kept or unmapped); an empty one is ignored.
  void give_back(RawRegion region) noexcept;

  /// Bytes in buffers kept free for reuse.
  size_t idle_bytes() const noexcept;

 private:
  static constexpr size_t kSmallestClass = 12;  // 4 KiB
  static constexpr size_t kClasses = 64 - kSmallestClass;
  static constexpr size_t kKeptPerClass = 4;  // covers a window of calls in flight

  static size_t class_of(size_t bytes) noexcept;

  const ProtectionDomain* pd_;
  Access access_;
  struct Kept {
    std::array<RawRegion, kKeptPerClass> regions;
    size_t count = 0;
  };
  std::array<Kept, kClasses> free_;
};

}  // namespace rdmakit::rpc::detail::rc

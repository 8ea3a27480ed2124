// Typed slices of registered memory: a LocalBuffer is memory this process registered (it
// carries the lkey), a RemoteBuffer is memory a peer registered (it carries the rkey). Both
// split like spans; going outside the slice is a programming error.
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "rdmakit/error.hpp"

namespace rdmakit {

namespace detail {
[[noreturn]] void out_of_bounds(const char* kind, uint64_t offset, uint64_t count,
                                uint64_t size) noexcept;
}

/// A slice of registered local memory (address, length, lkey): what a work request
/// reads from or writes into. Cheap to copy; it does not own the memory. Slicing out of
/// bounds is a programming error.
class LocalBuffer {
 public:
  LocalBuffer() = default;
  /// The `size` bytes at `data`, in the region with `lkey`.
  LocalBuffer(void* data, size_t size, uint32_t lkey) noexcept
      : data_(static_cast<std::byte*>(data)), size_(size), lkey_(lkey) {}

  /// First byte of the slice.
  std::byte* data() const noexcept { return data_; }
  /// Length in bytes.
  size_t size() const noexcept { return size_; }
  /// Local key of the region.
  uint32_t lkey() const noexcept { return lkey_; }
  /// True for a zero-length slice.
  bool empty() const noexcept { return size_ == 0; }
  /// The slice as bytes.
  std::span<std::byte> bytes() const noexcept { return {data_, size_}; }
  /// The slice as an array of T (size must be a multiple of sizeof(T)).
  template <typename T>
  std::span<T> as() const noexcept {
    RDMAKIT_REQUIRE(size_ % sizeof(T) == 0, "LocalBuffer::as<T>() on a size not a multiple of T");
    return {reinterpret_cast<T*>(data_), size_ / sizeof(T)};
  }

  /// `count` bytes from `offset`.
  LocalBuffer subspan(size_t offset, size_t count) const noexcept {
    if (offset > size_ || count > size_ - offset)
      detail::out_of_bounds("LocalBuffer", offset, count, size_);
    return {data_ + offset, count, lkey_};
  }
  /// Everything from `offset` on.
  LocalBuffer subspan(size_t offset) const noexcept {
    return subspan(offset, size_ - std::min(offset, size_));
  }
  /// The first `count` bytes.
  LocalBuffer first(size_t count) const noexcept { return subspan(0, count); }
  /// The last `count` bytes.
  LocalBuffer last(size_t count) const noexcept {
    if (count > size_) detail::out_of_bounds("LocalBuffer", size_ - count, count, size_);
    return subspan(size_ - count, count);
  }
  /// The bytes before `at` and those from `at` on.
  std::pair<LocalBuffer, LocalBuffer> split(size_t at) const noexcept {
    return {first(at), subspan(at)};
  }

  /// The slice as a scatter/gather entry.
  ibv_sge sge() const noexcept {
    return {reinterpret_cast<uintptr_t>(data_), static_cast<uint32_t>(size_), lkey_};
  }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  uint32_t lkey_ = 0;
};

/// A slice of a peer's registered memory (address, length, rkey, and the expiry of the
/// grant it came from): the target of a WRITE, READ or atomic. Cheap to copy.
class RemoteBuffer {
 public:
  /// Bytes of the wire form (address, length, rkey, and the grant expiry if any).
  static constexpr size_t kWireSize = 28;

  RemoteBuffer() = default;
  /// The `size` bytes at `address` in the peer's region with `rkey`.
  RemoteBuffer(uint64_t address, uint64_t size, uint32_t rkey, uint64_t expires_at_ms = 0) noexcept
      : address_(address), size_(size), rkey_(rkey), expires_at_ms_(expires_at_ms) {}

  /// Address in the peer's space (as its region maps it).
  uint64_t address() const noexcept { return address_; }
  /// Length in bytes.
  uint64_t size() const noexcept { return size_; }
  /// Remote key of the peer's region.
  uint32_t rkey() const noexcept { return rkey_; }
  /// True for a zero-length slice.
  bool empty() const noexcept { return size_ == 0; }
  /// Time since the epoch (system_clock, ms) after which the owner revokes access; 0: never.
  uint64_t expires_at_ms() const noexcept { return expires_at_ms_; }

  /// `count` bytes from `offset`.
  RemoteBuffer subspan(uint64_t offset, uint64_t count) const noexcept {
    if (offset > size_ || count > size_ - offset)
      detail::out_of_bounds("RemoteBuffer", offset, count, size_);
    return {address_ + offset, count, rkey_, expires_at_ms_};
  }
  /// Everything from `offset` on.
  RemoteBuffer subspan(uint64_t offset) const noexcept {
    return subspan(offset, size_ - std::min(offset, size_));
  }
  /// The first `count` bytes.
  RemoteBuffer first(uint64_t count) const noexcept { return subspan(0, count); }
  /// The last `count` bytes.
  RemoteBuffer last(uint64_t count) const noexcept {
    if (count > size_) detail::out_of_bounds("RemoteBuffer", size_ - count, count, size_);
    return subspan(size_ - count, count);
  }
  /// The bytes before `at` and those from `at` on.
  std::pair<RemoteBuffer, RemoteBuffer> split(uint64_t at) const noexcept {
    return {first(at), subspan(at)};
  }

  /// Little-endian wire form, for sending to the peer that will access it.
  void encode(std::span<std::byte, kWireSize> out) const noexcept;
  /// Reads the wire form encode() wrote.
  static RemoteBuffer decode(std::span<const std::byte, kWireSize> in) noexcept;

 private:
  uint64_t address_ = 0;
  uint64_t size_ = 0;
  uint32_t rkey_ = 0;
  uint64_t expires_at_ms_ = 0;
};

}  // namespace rdmakit

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

class LocalBuffer {
 public:
  LocalBuffer() = default;
  LocalBuffer(void* data, size_t size, uint32_t lkey) noexcept
      : data_(static_cast<std::byte*>(data)), size_(size), lkey_(lkey) {}

  std::byte* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  uint32_t lkey() const noexcept { return lkey_; }
  bool empty() const noexcept { return size_ == 0; }
  std::span<std::byte> bytes() const noexcept { return {data_, size_}; }
  /// The slice as an array of T (size must be a multiple of sizeof(T)).
  template <typename T>
  std::span<T> as() const noexcept {
    RDMAKIT_REQUIRE(size_ % sizeof(T) == 0, "LocalBuffer::as<T>() on a size not a multiple of T");
    return {reinterpret_cast<T*>(data_), size_ / sizeof(T)};
  }

  LocalBuffer subspan(size_t offset, size_t count) const noexcept {
    if (offset > size_ || count > size_ - offset)
      detail::out_of_bounds("LocalBuffer", offset, count, size_);
    return {data_ + offset, count, lkey_};
  }
  LocalBuffer subspan(size_t offset) const noexcept {
    return subspan(offset, size_ - std::min(offset, size_));
  }
  LocalBuffer first(size_t count) const noexcept { return subspan(0, count); }
  LocalBuffer last(size_t count) const noexcept {
    if (count > size_) detail::out_of_bounds("LocalBuffer", size_ - count, count, size_);
    return subspan(size_ - count, count);
  }
  std::pair<LocalBuffer, LocalBuffer> split(size_t at) const noexcept {
    return {first(at), subspan(at)};
  }

  ibv_sge sge() const noexcept {
    return {reinterpret_cast<uintptr_t>(data_), static_cast<uint32_t>(size_), lkey_};
  }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  uint32_t lkey_ = 0;
};

class RemoteBuffer {
 public:
  /// Bytes of the wire form (address, length, rkey, and the grant expiry if any).
  static constexpr size_t kWireSize = 28;

  RemoteBuffer() = default;
  RemoteBuffer(uint64_t address, uint64_t size, uint32_t rkey, uint64_t expires_at_ms = 0) noexcept
      : address_(address), size_(size), rkey_(rkey), expires_at_ms_(expires_at_ms) {}

  uint64_t address() const noexcept { return address_; }
  uint64_t size() const noexcept { return size_; }
  uint32_t rkey() const noexcept { return rkey_; }
  bool empty() const noexcept { return size_ == 0; }
  /// Time since the epoch (system_clock, ms) after which the owner revokes access; 0: never.
  uint64_t expires_at_ms() const noexcept { return expires_at_ms_; }

  RemoteBuffer subspan(uint64_t offset, uint64_t count) const noexcept {
    if (offset > size_ || count > size_ - offset)
      detail::out_of_bounds("RemoteBuffer", offset, count, size_);
    return {address_ + offset, count, rkey_, expires_at_ms_};
  }
  RemoteBuffer subspan(uint64_t offset) const noexcept {
    return subspan(offset, size_ - std::min(offset, size_));
  }
  RemoteBuffer first(uint64_t count) const noexcept { return subspan(0, count); }
  RemoteBuffer last(uint64_t count) const noexcept {
    if (count > size_) detail::out_of_bounds("RemoteBuffer", size_ - count, count, size_);
    return subspan(size_ - count, count);
  }
  std::pair<RemoteBuffer, RemoteBuffer> split(uint64_t at) const noexcept {
    return {first(at), subspan(at)};
  }

  /// Little-endian wire form, for sending to the peer that will access it.
  void encode(std::span<std::byte, kWireSize> out) const noexcept;
  static RemoteBuffer decode(std::span<const std::byte, kWireSize> in) noexcept;

 private:
  uint64_t address_ = 0;
  uint64_t size_ = 0;
  uint32_t rkey_ = 0;
  uint64_t expires_at_ms_ = 0;
};

}  // namespace rdmakit

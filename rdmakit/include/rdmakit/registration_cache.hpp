// Registrations of the user's own memory (heap buffers, hugepages, mmap'd files), cached so
// that sending from the same buffer again does not register it again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <system_error>

#include "rdmakit/buffer.hpp"
#include "rdmakit/memory_region.hpp"

namespace rdmakit {

/// Counters of a RegistrationCache.
struct RegistrationCacheStats {
  uint64_t hits = 0;            ///< acquire() served by an existing registration
  uint64_t misses = 0;          ///< acquire() that registered memory
  uint64_t evictions = 0;       ///< unused registrations deregistered to stay within capacity
  size_t registrations = 0;     ///< live registrations, in use or not
  size_t bytes_registered = 0;  ///< bytes they cover
};

namespace detail {
class RegistrationCacheState;
struct CachedEntry;
}  // namespace detail

/// A reference to a registration that covers the acquired range; the registration stays
/// valid until this is destroyed. It must be destroyed before its cache.
class CachedRegistration {
 public:
  CachedRegistration() = default;
  CachedRegistration(const CachedRegistration&) = delete;
  CachedRegistration& operator=(const CachedRegistration&) = delete;
  /// Takes over `other`'s reference.
  CachedRegistration(CachedRegistration&& other) noexcept;
  /// Releases this reference, then takes over `other`'s.
  CachedRegistration& operator=(CachedRegistration&& other) noexcept;
  ~CachedRegistration();

  /// True when it holds a registration.
  explicit operator bool() const noexcept { return entry_ != nullptr; }
  /// Exactly the acquired range, with the keys of the registration that covers it.
  LocalBuffer buffer() const noexcept { return {data_, size_, lkey_}; }
  /// The acquired range as a peer addresses it (needs remote rights).
  RemoteBuffer remote() const noexcept {
    return {reinterpret_cast<uintptr_t>(data_), size_, rkey_};
  }

 private:
  friend class detail::RegistrationCacheState;
  void release() noexcept;

  detail::RegistrationCacheState* cache_ = nullptr;
  detail::CachedEntry* entry_ = nullptr;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  uint32_t lkey_ = 0;
  uint32_t rkey_ = 0;
};

/// Registers whole pages around the ranges asked for and reuses a registration whenever one
/// covers a range with at least the rights asked for. Registrations nobody holds are kept in
/// least-recently-used order and deregistered when the registered bytes exceed the capacity
/// (held ones are never evicted, so the capacity can be exceeded while they are held).
/// Thread-safe; `pd` must outlive the cache.
class RegistrationCache {
 public:
  /// A cache on `pd` keeping at most `capacity_bytes` registered while unused.
  RegistrationCache(const ProtectionDomain& pd, size_t capacity_bytes);
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;
  /// Takes over the other cache's registrations.
  RegistrationCache(RegistrationCache&&) noexcept;
  /// Deregisters this cache's memory, then takes over the other's.
  RegistrationCache& operator=(RegistrationCache&&) noexcept;
  /// Deregisters everything. CachedRegistrations still alive are a programming error.
  ~RegistrationCache();

  /// A registration covering [data, data + size) with `access`. Throws Error (the verbs error,
  /// e.g. EFAULT for memory that is not mapped) when registering fails.
  CachedRegistration acquire(void* data, size_t size, Access access);
  /// As above; on failure `ec` is set and the result is empty.
  CachedRegistration acquire(void* data, size_t size, Access access, std::error_code& ec);

  /// Forgets every registration overlapping [data, data + size), which the caller is about to
  /// unmap or remap: unused ones are deregistered now, held ones when they are released. Later
  /// acquires register the new memory afresh.
  void invalidate(void* data, size_t size);

  /// Current counters.
  RegistrationCacheStats stats() const;

 private:
  std::unique_ptr<detail::RegistrationCacheState> state_;
};

}  // namespace rdmakit

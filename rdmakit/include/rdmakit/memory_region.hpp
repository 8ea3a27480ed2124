// Protection domains and memory regions.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>

#include "rdmakit/buffer.hpp"
#include "rdmakit/context.hpp"

namespace rdmakit {

/// Access rights of a memory region (IBV_ACCESS_* bits).
enum class Access : int {
  none = 0,
  local_write = IBV_ACCESS_LOCAL_WRITE,
  remote_write = IBV_ACCESS_REMOTE_WRITE,
  remote_read = IBV_ACCESS_REMOTE_READ,
  remote_atomic = IBV_ACCESS_REMOTE_ATOMIC,
  /// What a buffer that peers may read, write and use atomics on needs.
  all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
        IBV_ACCESS_REMOTE_ATOMIC,
};
constexpr Access operator|(Access a, Access b) noexcept {
  return static_cast<Access>(static_cast<int>(a) | static_cast<int>(b));
}
constexpr Access operator&(Access a, Access b) noexcept {
  return static_cast<Access>(static_cast<int>(a) & static_cast<int>(b));
}
/// True if every right in `wanted` is also in `allowed`.
constexpr bool within(Access wanted, Access allowed) noexcept {
  return (static_cast<int>(wanted) & ~static_cast<int>(allowed)) == 0;
}
std::string to_string(Access access);

class MemoryRegion;

/// A protection domain: QPs and memory regions of one PD may be used together.
class ProtectionDomain {
 public:
  /// Throws Error on failure (ibv_alloc_pd).
  explicit ProtectionDomain(const Context& context);
  ProtectionDomain(const ProtectionDomain&) = delete;
  ProtectionDomain& operator=(const ProtectionDomain&) = delete;
  /// Takes over the PD.
  ProtectionDomain(ProtectionDomain&&) noexcept = default;
  /// Releases this PD, then takes over the other.
  ProtectionDomain& operator=(ProtectionDomain&&) noexcept = default;

  /// The verbs PD.
  ibv_pd* get() const;
  /// Registers [data, data + size). Throws Error naming the range on failure.
  MemoryRegion register_memory(void* data, size_t size, Access access) const;
  /// As above, reporting a failure in `ec` (the region is then empty).
  MemoryRegion register_memory(void* data, size_t size, Access access, std::error_code& ec) const;

  /// Shared ownership, for objects that must keep it alive.
  const std::shared_ptr<ibv_pd>& handle() const;

 private:
  std::shared_ptr<ibv_pd> pd_;
};

/// Registered memory; move-only, deregistered on destruction, keeps its PD alive.
class MemoryRegion {
 public:
  /// An empty region (converts to false).
  MemoryRegion() = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  /// Takes over `other`'s registration.
  MemoryRegion(MemoryRegion&& other) noexcept;
  /// Deregisters this region, then takes over `other`'s.
  MemoryRegion& operator=(MemoryRegion&& other) noexcept;
  /// Deregisters the memory (the memory itself stays the caller's).
  ~MemoryRegion();

  /// True when it holds a registration.
  explicit operator bool() const noexcept { return mr_ != nullptr; }
  /// The verbs MR.
  ibv_mr* get() const;
  /// First registered byte.
  std::byte* data() const { return static_cast<std::byte*>(get()->addr); }
  /// Registered bytes.
  size_t size() const { return get()->length; }
  /// Local key, for this side's work requests.
  uint32_t lkey() const { return get()->lkey; }
  /// Remote key, for peers' RDMA operations.
  uint32_t rkey() const { return get()->rkey; }
  /// The rights it was registered with.
  Access access() const noexcept { return access_; }

  /// The whole region as a local slice, and as the slice a peer addresses.
  LocalBuffer local() const { return {data(), size(), lkey()}; }
  /// The whole region as a peer addresses it.
  RemoteBuffer remote() const { return {reinterpret_cast<uintptr_t>(data()), size(), rkey()}; }

 private:
  friend class ProtectionDomain;
  MemoryRegion(ibv_mr* mr, Access access, std::shared_ptr<ibv_pd> pd) noexcept
      : mr_(mr), access_(access), pd_(std::move(pd)) {}
  ibv_mr* mr_ = nullptr;
  Access access_ = Access::none;
  std::shared_ptr<ibv_pd> pd_;  ///< keeps the PD alive while registered
};

}  // namespace rdmakit

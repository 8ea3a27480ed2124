// Registered memory handed out in blocks. A MemoryAllocator registers large chunks once and
// cuts them into power-of-two blocks, so the data path never calls ibv_reg_mr. RawRegion is
// registered memory for users who manage its contents themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <system_error>

#include "rdmakit/buffer.hpp"
#include "rdmakit/memory_region.hpp"

namespace rdmakit {

/// Fresh page-aligned anonymous memory registered as one region. The memory is unmapped after
/// the region is deregistered. Independent of any allocator: it may outlive the one that made it.
class RawRegion {
 public:
  RawRegion() = default;
  /// Maps `size` bytes (rounded up to whole pages, zero-filled) and registers them. Throws Error.
  RawRegion(const ProtectionDomain& pd, size_t size, Access access);
  /// As above; on failure `ec` is set and the result is empty.
  RawRegion(const ProtectionDomain& pd, size_t size, Access access, std::error_code& ec);
  RawRegion(const RawRegion&) = delete;
  RawRegion& operator=(const RawRegion&) = delete;
  /// Takes over `other`'s mapping and registration.
  RawRegion(RawRegion&& other) noexcept;
  /// Releases this region, then takes over `other`'s.
  RawRegion& operator=(RawRegion&& other) noexcept;
  ~RawRegion();

  /// True when it holds a registered mapping.
  explicit operator bool() const noexcept { return static_cast<bool>(region_); }
  /// The registration.
  const MemoryRegion& region() const noexcept { return region_; }
  /// First byte of the mapping.
  std::byte* data() const { return region_.data(); }
  /// Registered bytes (whole pages).
  size_t size() const { return region_.size(); }
  /// The whole region as a local buffer.
  LocalBuffer local() const { return region_.local(); }
  /// The whole region as a peer addresses it.
  RemoteBuffer remote() const { return region_.remote(); }

 private:
  void release() noexcept;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  MemoryRegion region_;  ///< deregistered before the mapping goes
};

/// What a block is for: send and receive buffers have separate budgets.
enum class Purpose : uint8_t { send, recv, general };
/// Whether allocate() clears the block; uninitialized skips the memset for buffers that are
/// about to be overwritten (e.g. receive buffers).
enum class Init : uint8_t { zeroed, uninitialized };

/// How a MemoryAllocator carves, budgets and restricts its memory.
struct AllocatorOptions {
  /// Bytes mapped and registered at a time; a power of two of at least one page. Blocks up to
  /// chunk_size / 4 come from chunks, bigger requests get a registered mapping of their own.
  size_t chunk_size = size_t{4} << 20;
  /// Most bytes held by live send (recv) allocations; 0 means unlimited.
  size_t send_budget = 0;
  /// As send_budget, for receive allocations.
  size_t recv_budget = 0;
  /// Rights of allocate() calls that name none.
  Access default_access = Access::local_write;
  /// Rights an allocation may ask for; asking for more is a runtime error.
  Access allowed_access = Access::all;
};

/// Counters of a MemoryAllocator (a snapshot; other threads may be allocating).
struct AllocatorStats {
  size_t bytes_registered = 0;      ///< chunks plus dedicated mappings of large allocations
  size_t bytes_carved = 0;          ///< chunk bytes cut into blocks so far
  size_t bytes_free_in_arenas = 0;  ///< carved blocks returned to the arenas (not in thread caches)
  /// Bytes held by live allocations, counted in whole blocks (whole pages for large ones).
  size_t bytes_in_use_send = 0;
  /// As bytes_in_use_send, for Purpose::recv.
  size_t bytes_in_use_recv = 0;
  /// As bytes_in_use_send, for Purpose::general.
  size_t bytes_in_use_general = 0;
};

namespace detail {
class AllocatorState;
class Arena;
}  // namespace detail

/// A block from a MemoryAllocator; its destructor gives the block back, on whichever thread
/// runs it. It must be destroyed before the allocator (doing otherwise stops the program as a
/// programming error).
class Allocation {
 public:
  Allocation() = default;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  /// Takes over `other`'s block; `other` becomes empty.
  Allocation(Allocation&& other) noexcept;
  /// Gives this block back, then takes over `other`'s.
  Allocation& operator=(Allocation&& other) noexcept;
  ~Allocation();

  /// True when it holds a block.
  explicit operator bool() const noexcept { return data_ != nullptr; }
  /// First byte of the block.
  std::byte* data() const noexcept { return data_; }
  /// The size asked for (the block behind it may be larger).
  size_t size() const noexcept { return size_; }
  /// The budget it counts against.
  Purpose purpose() const noexcept { return purpose_; }
  /// The allocation as a local buffer (size() bytes).
  LocalBuffer buffer() const noexcept { return {data_, size_, lkey_}; }
  /// The allocation as a peer addresses it (needs remote rights).
  RemoteBuffer remote() const noexcept {
    return {reinterpret_cast<uintptr_t>(data_), size_, rkey_};
  }

 private:
  friend class detail::AllocatorState;
  void release() noexcept;

  detail::AllocatorState* owner_ = nullptr;
  detail::Arena* arena_ = nullptr;        ///< null for a dedicated mapping
  std::unique_ptr<RawRegion> dedicated_;  ///< the mapping of a large allocation
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  uint32_t lkey_ = 0;
  uint32_t rkey_ = 0;
  uint8_t size_class_ = 0;
  Purpose purpose_ = Purpose::general;
};

/// Hands out registered blocks from arenas, one arena per access set (all on one PD). Each
/// thread keeps a small cache of free blocks per arena and size class, so allocating and
/// freeing usually take no lock; a thread's cache goes back to the arenas when it exits.
/// Thread-safe.
class MemoryAllocator {
 public:
  /// Registers nothing until the first allocation; `pd` must outlive the allocator. Invalid
  /// options (chunk size, default rights not allowed) are a programming error.
  explicit MemoryAllocator(const ProtectionDomain& pd, const AllocatorOptions& options = {});
  MemoryAllocator(const MemoryAllocator&) = delete;
  MemoryAllocator& operator=(const MemoryAllocator&) = delete;
  /// Takes over the other allocator's memory and state.
  MemoryAllocator(MemoryAllocator&&) noexcept;
  /// Releases this allocator's memory, then takes over the other's.
  MemoryAllocator& operator=(MemoryAllocator&&) noexcept;
  /// Deregisters and unmaps every chunk. Live allocations are a programming error.
  ~MemoryAllocator();

  /// A block of `size` (> 0) bytes with `access` rights. Throws Error: Errc::budget_exhausted
  /// when the purpose's budget has no room, std::errc::permission_denied when `access` is not
  /// allowed, or the verbs error of registering a new chunk.
  Allocation allocate(size_t size, Purpose purpose = Purpose::general, Init init = Init::zeroed);
  /// As above, with explicit `access` rights instead of the default ones.
  Allocation allocate(size_t size, Access access, Purpose purpose = Purpose::general,
                      Init init = Init::zeroed);
  /// As above; on failure `ec` is set and the result is empty.
  Allocation allocate(size_t size, Access access, Purpose purpose, Init init, std::error_code& ec);

  /// Registered memory the caller manages itself, outside the budgets and statistics.
  /// Throws Error (std::errc::permission_denied when `access` is not allowed).
  RawRegion raw_region(size_t size, Access access) const;

  /// Current counters.
  AllocatorStats stats() const;
  /// The options it was made with.
  const AllocatorOptions& options() const;

 private:
  std::unique_ptr<detail::AllocatorState> state_;
};

}  // namespace rdmakit

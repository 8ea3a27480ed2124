// An arena: the chunks of one allocator registered with one access set, and the free blocks
// cut from them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <system_error>
#include <vector>

#include "rdmakit/allocator.hpp"
#include "size_classes.hpp"

namespace rdmakit::detail {

// A free block and the keys of the chunk it was cut from.
struct Block {
  std::byte* data;
  uint32_t lkey;
  uint32_t rkey;
};

class Arena {
 public:
  // `pd` must outlive the arena; `bytes_registered` counts the chunks it maps.
  Arena(const ProtectionDomain& pd, Access access, size_t chunk_size,
        std::atomic<size_t>& bytes_registered);
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Appends up to `count` blocks of `size_class` to `out`, cutting new ones from chunks
  // (mapping and registering a chunk when needed). Returns false, with `ec` set, when it could
  // not provide a single block.
  bool take(unsigned size_class, size_t count, std::vector<Block>& out, std::error_code& ec);
  // Returns free blocks of `size_class` to the arena.
  void give_back(unsigned size_class, std::span<const Block> blocks);

  // Adds this arena's carved and free bytes to `stats`.
  void add_usage(AllocatorStats& stats) const;

 private:
  bool current_chunk_has_room(size_t bytes) const noexcept;
  // Cuts the unused end of the current chunk into free blocks of smaller classes.
  void cut_tail_into_free_blocks();
  bool map_chunk(std::error_code& ec);
  Block cut(size_t bytes) noexcept;

  const ProtectionDomain* pd_;
  const Access access_;
  const size_t chunk_size_;
  const SizeClasses classes_;
  std::atomic<size_t>* bytes_registered_;

  mutable std::mutex mutex_;
  std::vector<std::vector<Block>> free_;  // per size class
  std::vector<RawRegion> chunks_;         // never returned while the arena lives
  size_t chunk_used_ = 0;                 // bytes of chunks_.back() already cut into blocks
  size_t bytes_carved_ = 0;
  size_t bytes_free_ = 0;
};

}  // namespace rdmakit::detail

// Per-thread caches of free blocks, so that allocating and freeing usually take no lock.
//
// A thread's cache has one bin per (allocator, arena, size class). Keying bins by the arena
// is what keeps a block from ever being handed out by, or returned to, an arena other than
// the one whose chunk it was cut from (and so with the wrong keys).
//
// Bins outlive neither side safely on their own: a thread may exit while its allocators live,
// and an allocator may be destroyed while threads still hold bins for it. Allocators are
// therefore listed in a registry of live ids (ids are never reused). A thread that exits
// gives its blocks back only to arenas of live allocators, under the registry's lock, which
// the allocator's destructor also takes before freeing its arenas. Bins of dead allocators
// are dropped without being touched.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "chunk_arena.hpp"

namespace rdmakit::detail {

// A bin keeps up to this many bytes of blocks (at least one block, at most
// kMaxBlocksPerBin): enough to absorb bursts, little enough that idle threads hold little.
inline constexpr size_t kBinBytes = size_t{256} << 10;
inline constexpr size_t kMaxBlocksPerBin = 64;

inline size_t bin_capacity(size_t block_size) noexcept {
  return std::clamp<size_t>(kBinBytes / block_size, 1, kMaxBlocksPerBin);
}
// Blocks moved between a bin and its arena at a time, so the arena's lock is taken once per
// batch rather than once per block.
inline size_t bin_batch(size_t block_size) noexcept {
  return std::max<size_t>(bin_capacity(block_size) / 2, 1);
}

// Adds a live allocator to the registry; returns its id.
uint64_t register_allocator();
// Removes it; returns once no exiting thread is giving blocks back to its arenas.
void unregister_allocator(uint64_t allocator_id) noexcept;

class ThreadCache {
 public:
  // The calling thread's cache, or nullptr once the thread is tearing it down (callers then
  // go to the arena directly).
  static ThreadCache* current() noexcept;

  ThreadCache() = default;
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;
  // Gives every block back to its arena, if that arena's allocator still lives.
  ~ThreadCache();

  // The free blocks of (allocator, arena, size class); LIFO, so the block freed last (still
  // warm in the CPU cache) is reused first. Valid until the next call to bin().
  std::vector<Block>& bin(uint64_t allocator_id, Arena* arena, unsigned size_class);

 private:
  struct Bin {
    uint64_t allocator_id;
    Arena* arena;
    unsigned size_class;
    std::vector<Block> blocks;
  };
  std::vector<Bin> bins_;
};

}  // namespace rdmakit::detail

// The block sizes of a MemoryAllocator: powers of two from kMinBlockSize up to a quarter of
// the chunk size.
#pragma once

#include <bit>
#include <cstddef>

#include "pages.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::detail {

// One cache line: two blocks never share a line, so threads writing neighbouring blocks do
// not slow each other down.
inline constexpr size_t kMinBlockSize = 64;
inline constexpr unsigned kMinBlockShift = 6;
static_assert(size_t{1} << kMinBlockShift == kMinBlockSize);

// A chunk holds at least this many of the largest blocks, which bounds the tail of a chunk
// that is too short for the next block (it is cut into smaller blocks, see Arena).
inline constexpr size_t kLargestBlocksPerChunk = 4;

class SizeClasses {
 public:
  explicit SizeClasses(size_t chunk_size) noexcept {
    // Chunks are mapped and registered whole, so they are whole pages (and a page holds at
    // least kLargestBlocksPerChunk minimal blocks on every Linux system).
    RDMAKIT_REQUIRE(std::has_single_bit(chunk_size) && chunk_size >= page_size() &&
                        chunk_size / kLargestBlocksPerChunk >= kMinBlockSize,
                    "AllocatorOptions::chunk_size must be a power of two of at least one page");
    count_ = static_cast<unsigned>(std::countr_zero(chunk_size / kLargestBlocksPerChunk)) -
             kMinBlockShift + 1;
  }

  unsigned count() const noexcept { return count_; }
  size_t largest() const noexcept { return block_size(count_ - 1); }

  static constexpr size_t block_size(unsigned size_class) noexcept {
    return kMinBlockSize << size_class;
  }
  // The class of the smallest block that holds `size` bytes (at most largest()).
  static constexpr unsigned class_of(size_t size) noexcept {
    if (size <= kMinBlockSize) return 0;
    return static_cast<unsigned>(std::bit_width(size - 1)) - kMinBlockShift;
  }

 private:
  unsigned count_ = 0;
};

static_assert(SizeClasses::class_of(1) == 0 && SizeClasses::class_of(64) == 0);
static_assert(SizeClasses::class_of(65) == 1 && SizeClasses::class_of(128) == 1);
static_assert(SizeClasses::block_size(SizeClasses::class_of(1000)) == 1024);

}  // namespace rdmakit::detail

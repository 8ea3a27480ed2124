#include "chunk_arena.hpp"

namespace rdmakit::detail {

Arena::Arena(const ProtectionDomain& pd, Access access, size_t chunk_size,
             std::atomic<size_t>& bytes_registered)
    : pd_(&pd),
      access_(access),
      chunk_size_(chunk_size),
      classes_(chunk_size),
      bytes_registered_(&bytes_registered),
      free_(classes_.count()) {}

bool Arena::take(unsigned size_class, size_t count, std::vector<Block>& out, std::error_code& ec) {
  const size_t bytes = SizeClasses::block_size(size_class);
  std::lock_guard lock(mutex_);
  std::vector<Block>& free = free_[size_class];
  size_t taken = 0;
  for (; taken < count && !free.empty(); ++taken) {
    out.push_back(free.back());
    free.pop_back();
    bytes_free_ -= bytes;
  }
  for (; taken < count; ++taken) {
    if (!current_chunk_has_room(bytes)) {
      cut_tail_into_free_blocks();
      if (!map_chunk(ec)) break;
    }
    out.push_back(cut(bytes));
  }
  if (taken == 0) return false;
  ec.clear();
  return true;
}

void Arena::give_back(unsigned size_class, std::span<const Block> blocks) {
  std::lock_guard lock(mutex_);
  free_[size_class].insert(free_[size_class].end(), blocks.begin(), blocks.end());
  bytes_free_ += blocks.size() * SizeClasses::block_size(size_class);
}

void Arena::add_usage(AllocatorStats& stats) const {
  std::lock_guard lock(mutex_);
  stats.bytes_carved += bytes_carved_;
  stats.bytes_free_in_arenas += bytes_free_;
}

bool Arena::current_chunk_has_room(size_t bytes) const noexcept {
  return !chunks_.empty() && chunk_size_ - chunk_used_ >= bytes;
}

void Arena::cut_tail_into_free_blocks() {
  if (chunks_.empty()) return;
  // Every offset is a multiple of kMinBlockSize, so the tail splits exactly, largest first.
  for (unsigned size_class = classes_.count(); size_class-- > 0;) {
    const size_t bytes = SizeClasses::block_size(size_class);
    while (current_chunk_has_room(bytes)) {
      free_[size_class].push_back(cut(bytes));
      bytes_free_ += bytes;
    }
  }
}

bool Arena::map_chunk(std::error_code& ec) {
  RawRegion chunk(*pd_, chunk_size_, access_, ec);
  if (ec) return false;
  chunks_.push_back(std::move(chunk));
  chunk_used_ = 0;
  bytes_registered_->fetch_add(chunk_size_, std::memory_order_relaxed);
  return true;
}

Block Arena::cut(size_t bytes) noexcept {
  const RawRegion& chunk = chunks_.back();
  const Block block{chunk.data() + chunk_used_, chunk.region().lkey(), chunk.region().rkey()};
  chunk_used_ += bytes;
  bytes_carved_ += bytes;
  return block;
}

}  // namespace rdmakit::detail

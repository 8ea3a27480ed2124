#include "thread_cache.hpp"

#include <mutex>
#include <unordered_set>

namespace rdmakit::detail {
namespace {

struct LiveAllocators {
  std::mutex mutex;
  std::unordered_set<uint64_t> ids;
  uint64_t next_id = 1;
};

// Never destroyed: threads may exit (and flush their caches) while static objects are being
// destroyed.
LiveAllocators& live_allocators() {
  static LiveAllocators* const live = new LiveAllocators;
  return *live;
}

// Trivially destructible, so it can still be read while the thread's other thread_local
// objects are being destroyed.
thread_local bool t_cache_torn_down = false;

}  // namespace

uint64_t register_allocator() {
  LiveAllocators& live = live_allocators();
  std::lock_guard lock(live.mutex);
  const uint64_t id = live.next_id++;
  live.ids.insert(id);
  return id;
}

void unregister_allocator(uint64_t allocator_id) noexcept {
  LiveAllocators& live = live_allocators();
  std::lock_guard lock(live.mutex);
  live.ids.erase(allocator_id);
}

ThreadCache* ThreadCache::current() noexcept {
  if (t_cache_torn_down) return nullptr;
  thread_local ThreadCache cache;
  return &cache;
}

ThreadCache::~ThreadCache() {
  LiveAllocators& live = live_allocators();
  {
    std::lock_guard lock(live.mutex);
    for (const Bin& bin : bins_)
      if (live.ids.contains(bin.allocator_id)) bin.arena->give_back(bin.size_class, bin.blocks);
  }
  t_cache_torn_down = true;
}

std::vector<Block>& ThreadCache::bin(uint64_t allocator_id, Arena* arena, unsigned size_class) {
  for (Bin& bin : bins_)
    if (bin.arena == arena && bin.size_class == size_class && bin.allocator_id == allocator_id)
      return bin.blocks;
  // A new bin: the moment to drop the bins of allocators that are gone.
  {
    LiveAllocators& live = live_allocators();
    std::lock_guard lock(live.mutex);
    std::erase_if(bins_, [&](const Bin& bin) { return !live.ids.contains(bin.allocator_id); });
  }
  std::vector<Block> blocks;
  blocks.reserve(bin_capacity(SizeClasses::block_size(size_class)));
  bins_.push_back(Bin{allocator_id, arena, size_class, std::move(blocks)});
  return bins_.back().blocks;
}

}  // namespace rdmakit::detail

#include "engine/region_cache.hpp"

#include "engine/memory_access.hpp"

namespace softrdma {

bool RegionCache::fill(Entry& e, const TargetQp& target, uint32_t key) {
  e.key = 0;
  Registry& registry = Registry::instance();
  MrSlot* s = registry.mr_slot(key);
  if (!s) return false;
  std::atomic<uint32_t>& users = registry.mr_users(key);
  if (!pin_published(*s, users, key)) return false;
  // Pinned and published: the description cannot change until the pin is released.
  const bool cacheable = s->kind == KeyKind::kRegion && !(s->access & IBV_ACCESS_ON_DEMAND) &&
                         admits(*s, s->iova, s->length, target.owner(), target.qp->pd_id, 0);
  char* here = cacheable ? map_region(*s, target.owner(), s->iova, s->length) : nullptr;
  if (here) {
    e.generation = s->generation.load(std::memory_order_relaxed);
    e.target_generation = target.generation;
    e.access = s->access;
    e.iova = s->iova;
    e.length = s->length;
    e.here = here;
    e.host_addr = s->host_addr;
    e.slot = s;
    e.users = &users;
    e.on_shared_pages = s->memfd >= 0;
    e.key = key;
  }
  users.fetch_sub(1, std::memory_order_release);
  return here != nullptr;
}

bool RegionCache::pin(const TargetQp& target, uint32_t key, uint64_t addr, uint64_t length,
                      uint32_t access, Pinned& out) {
  Entry& e = entries_[Registry::mr_index(key) & (kEntries - 1)];
  if (e.key != key || e.target_generation != target.generation) {
    if (!fill(e, target, key)) return false;
  }
  if ((e.access & access) != access || addr < e.iova || length > e.length ||
      addr - e.iova > e.length - length)
    return false;
  if (!pin_published(*e.slot, *e.users, key)) {
    e.key = 0;
    return false;
  }
  if (e.slot->generation.load(std::memory_order_relaxed) != e.generation) {
    // Re-registered since it was cached (ibv_rereg_mr keeps the key): describe it afresh.
    unpin(Pinned{nullptr, 0, e.users, false});
    e.key = 0;
    return false;
  }
  out.here = e.here + (addr - e.iova);
  out.host_addr = e.host_addr + (addr - e.iova);
  out.users = e.users;
  out.on_shared_pages = e.on_shared_pages;
  return true;
}

}  // namespace softrdma

#include "engine/region_cache.hpp"

#include "engine/memory_access.hpp"

namespace softrdma {

bool RegionCache::fill(Entry& e, const TargetQp& target, uint32_t key) {
  e.key = 0;
  Registry& registry = Registry::instance();
  MrSlot* s = registry.mr_slot(key);
  if (!s) return false;
  Registry::note_reached_directly(s->reached_directly, reacher_);
  if (s->key.load(std::memory_order_seq_cst) != key) return false;
  // Announced and published: the description cannot change until the announcement ends.
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
    e.on_shared_pages = s->memfd >= 0;
    e.key = key;
  }
  return here != nullptr;
}

}  // namespace softrdma

#include "engine/local_key_cache.hpp"

#include "engine/memory_access.hpp"

namespace softrdma {

char* LocalKeyCache::look_up(uint32_t lkey, uint64_t addr, uint64_t length, uint32_t access,
                             uint32_t pd_id) {
  const MrSlot* s = Registry::instance().mr_slot(lkey);
  if (!s || s->key.load(std::memory_order_acquire) != lkey || s->kind != KeyKind::kRegion ||
      (s->access & IBV_ACCESS_ON_DEMAND) ||
      !admits(*s, addr, length, self_process(), pd_id, access))
    return nullptr;
  remember(*s, lkey);
  return reinterpret_cast<char*>(s->host_addr + (addr - s->iova));
}

}  // namespace softrdma

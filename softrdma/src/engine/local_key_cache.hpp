// The local region a QP's requests used last. A hit checks the slot's key and generation (two
// loads on a line the registry shares anyway) and the bounds, instead of finding the slot and
// comparing owner, PD, rights and range on every post. The region is this process's own
// memory: as with the full check, a deregistration racing a post of the same key is the
// application's race, which a NIC does not order either. Used under the QP's send lock.
#pragma once

#include <cstdint>

#include "engine/registry.hpp"

namespace softrdma {

class LocalKeyCache {
 public:
  /// `addr`..+`length` of region `lkey` in this process with every bit of `access`, as
  /// described when remembered and unchanged since; null if not (the caller checks afresh).
  char* find(uint32_t lkey, uint64_t addr, uint64_t length, uint32_t access) const {
    if (lkey != key_ || lkey == 0 || slot_->key.load(std::memory_order_acquire) != lkey ||
        slot_->generation.load(std::memory_order_relaxed) != generation_ ||
        (access_ & access) != access || addr < iova_ || length > length_ ||
        addr - iova_ > length_ - length)
      return nullptr;
    return here_ + (addr - iova_);
  }

  /// As find(), and on a miss looks the key up in the registry: a region of this process in
  /// `pd_id` with every bit of `access` that is not on demand is remembered and reached. Null
  /// for anything else, which the caller checks the general way (and reports).
  char* reach(uint32_t lkey, uint64_t addr, uint64_t length, uint32_t access, uint32_t pd_id) {
    if (char* here = find(lkey, addr, length, access)) return here;
    return look_up(lkey, addr, length, access, pd_id);
  }

 private:
  char* look_up(uint32_t lkey, uint64_t addr, uint64_t length, uint32_t access, uint32_t pd_id);

  /// Remembers `slot`, which the caller found live under `lkey` and admitted for this QP
  /// (a region of this process, in the QP's PD, not on demand).
  void remember(const MrSlot& slot, uint32_t lkey) {
    generation_ = slot.generation.load(std::memory_order_acquire);
    slot_ = &slot;
    access_ = slot.access;
    iova_ = slot.iova;
    length_ = slot.length;
    here_ = reinterpret_cast<char*>(slot.host_addr);
    key_ = lkey;
  }

  uint32_t key_ = 0;  // 0: nothing remembered
  uint32_t generation_ = 0;
  uint32_t access_ = 0;
  const MrSlot* slot_ = nullptr;
  uint64_t iova_ = 0;
  uint64_t length_ = 0;
  char* here_ = nullptr;  // iova in this process
};

}  // namespace softrdma

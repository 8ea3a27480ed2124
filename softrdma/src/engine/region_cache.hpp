// The remote regions a requester QP has used lately. A same-host access checks its key,
// bounds and rights against this copy, on the QP's own cache lines, instead of walking the
// host's registry and mapping the owner's pages again. An entry is a copy of a registry
// slot's description and is trusted only once the access is announced (the QP's
// DirectAccess word names the key) and the slot still carries the same key and generation:
// ibv_dereg_mr and ibv_rereg_mr unpublish the key and then wait until no announcement names
// it, so an announced access never reaches a region that is gone.
#pragma once

#include <cstdint>

#include "engine/memory_access.hpp"
#include "engine/registry.hpp"
#include "engine/responder.hpp"

namespace softrdma {

class RegionCache {
 public:
  /// The owning QP's Registry::reacher_mark, noted in each region it fills an entry for.
  void set_reacher(uint32_t mark) { reacher_ = mark; }

  /// Where an access lands: `here` is its first byte in this process, `host_addr` the same
  /// byte in the owner's address space. Set by a reach() that returns true, and only then:
  /// no initializers, since zeroing it first is on every same-host operation's path.
  struct Reach {
    char* here;
    uint64_t host_addr;
    bool on_shared_pages;  // every process of the host maps the region
  };

  /// Finds [addr, addr+length) of region `key` of the owner of `target`, in the target's PD
  /// and with every bit of `access`. The caller has announced `key` in its DirectAccess
  /// word (seq_cst) and keeps it announced while it uses the range. False when that is not
  /// allowed or the region cannot be reached by a plain memory access here (a window, an
  /// on-demand region of this process, a peer's region outside shared pages): the general
  /// path then decides. Inline: the common hit is on every same-host operation's path.
  [[gnu::always_inline]] bool reach(const TargetQp& target, uint32_t key, uint64_t addr,
                                    uint64_t length, uint32_t access, Reach& out) {
    Entry& e = entries_[(key >> Registry::kKeyVariantBits) & (kEntries - 1)];
    if (e.key != key || e.target_generation != target.generation) {
      if (!fill(e, target, key)) return false;
    }
    if ((e.access & access) != access || addr < e.iova || length > e.length ||
        addr - e.iova > e.length - length)
      return false;
    // Loaded after the announcement: a retirement that began before it shows here.
    const MrSlot& slot = *e.slot;
    if (slot.key.load(std::memory_order_seq_cst) != key ||
        slot.generation.load(std::memory_order_acquire) != e.generation) {
      // Deregistered, or re-registered since it was cached (ibv_rereg_mr keeps the key).
      e.key = 0;
      return false;
    }
    out.here = e.here + (addr - e.iova);
    out.host_addr = e.host_addr + (addr - e.iova);
    out.on_shared_pages = e.on_shared_pages;
    return true;
  }

 private:
  struct Entry {
    uint32_t key = 0;  // 0: empty
    uint32_t generation = 0;
    uint32_t target_generation = 0;  // of the target QP's slot it was filled for
    uint32_t access = 0;
    uint64_t iova = 0;
    uint64_t length = 0;
    char* here = nullptr;    // iova, mapped here
    uint64_t host_addr = 0;  // iova in the owner's address space
    MrSlot* slot = nullptr;
    bool on_shared_pages = false;
  };
  static constexpr uint32_t kEntries = 4;
  static_assert((kEntries & (kEntries - 1)) == 0, "entries are picked by masking key bits");

  // Describes the region `key` names now into `e` (the caller has announced `key`).
  bool fill(Entry& e, const TargetQp& target, uint32_t key);
  Entry entries_[kEntries];
  uint32_t reacher_ = Registry::kReachedByMany;  // until set: every announcement is looked at
};

}  // namespace softrdma

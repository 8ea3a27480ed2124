#include "engine/memory_windows.hpp"

#include "engine/registry.hpp"

namespace softrdma {
namespace {

constexpr uint32_t kWindowRights =
    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

// The live slot `key` names, if it is of `owner`; else nullptr.
MrSlot* live_slot(uint32_t key, const ProcessId& owner) {
  MrSlot* s = Registry::instance().mr_slot(key);
  if (!s || s->key.load(std::memory_order_acquire) != key) return nullptr;
  if (s->pid != owner.pid || s->start_time != owner.start_time) return nullptr;
  return s;
}

bool is_window(const MrSlot& s) {
  return s.kind == KeyKind::kWindowType1 || s.kind == KeyKind::kWindowType2;
}

// Keys of one window share its name (the upper 24 bits); the low byte is whatever the last
// bind made it, which the application's ibv_mw may not show (a type 2 bind's key is the work
// request's, as on other devices).
bool same_window(uint32_t a, uint32_t b) {
  return Registry::same_key_name(a, b);
}

// This process's window that `key` names, whatever its low byte; its key now in `current`.
MrSlot* own_window(uint32_t key, uint32_t& current) {
  const MrSlot* found = Registry::instance().mr_slot(key);
  current = found ? found->key.load(std::memory_order_acquire) : 0;
  MrSlot* w = same_window(current, key) ? live_slot(current, self_process()) : nullptr;
  return w && is_window(*w) ? w : nullptr;
}

// Changes a window under a new key: unpublished first and no accessor inside, so an access
// sees the old binding or the new one, never a mix.
template <typename Change>
void rebind(MrSlot& w, uint32_t old_key, uint32_t new_key, Change change) {
  Registry& registry = Registry::instance();
  w.key.store(0, std::memory_order_seq_cst);
  registry.wait_until_unused(w, old_key);
  if (MrSlot* region = w.parent_key ? registry.mr_slot(w.parent_key) : nullptr)
    region->windows.fetch_sub(1, std::memory_order_relaxed);
  change(w);
  if (MrSlot* region = w.parent_key ? registry.mr_slot(w.parent_key) : nullptr)
    region->windows.fetch_add(1, std::memory_order_relaxed);
  w.key.store(new_key, std::memory_order_release);
}

}  // namespace

ibv_wc_status bind_window(const WindowBind& b, uint32_t pd_id, uint32_t qpn) {
  uint32_t current = 0;
  MrSlot* w = own_window(b.window_key, current);
  if (!w || w->pd_id != pd_id || !same_window(b.new_key, b.window_key)) return IBV_WC_MW_BIND_ERR;
  const bool type2 = w->kind == KeyKind::kWindowType2;
  // A type 2 window is bound once, then invalidated before it is bound again.
  if (type2 && (w->parent_key != 0 || b.region_key == 0)) return IBV_WC_MW_BIND_ERR;
  // Local write means nothing for a window and is let through (as on rxe); zero-based
  // windows are not offered.
  if (b.access & ~(kWindowRights | IBV_ACCESS_LOCAL_WRITE)) return IBV_WC_MW_BIND_ERR;
  if (b.region_key == 0) {
    if (b.length != 0) return IBV_WC_MW_BIND_ERR;
    rebind(*w, current, b.new_key, [](MrSlot& s) {
      s.parent_key = 0;
      s.iova = s.length = 0;
      s.access = 0;
    });
    return IBV_WC_SUCCESS;
  }
  const MrSlot* region = live_slot(b.region_key, self_process());
  if (!region || region->kind != KeyKind::kRegion || region->pd_id != pd_id ||
      !(region->access & IBV_ACCESS_MW_BIND))
    return IBV_WC_MW_BIND_ERR;
  if (b.addr < region->iova || b.length > region->length ||
      b.addr - region->iova > region->length - b.length)
    return IBV_WC_MW_BIND_ERR;
  // Remote write and atomic rights need a region the device may write (IBTA 10.6.7.2.2).
  if ((b.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(region->access & IBV_ACCESS_LOCAL_WRITE))
    return IBV_WC_MW_BIND_ERR;
  rebind(*w, current, b.new_key, [&](MrSlot& s) {
    s.parent_key = b.region_key;
    s.bound_qpn = type2 ? qpn : 0;
    s.iova = b.addr;
    s.length = b.length;
    s.access = b.access;
  });
  return IBV_WC_SUCCESS;
}

bool invalidate_window(uint32_t key, const ProcessId& owner, uint32_t pd_id, uint32_t qpn) {
  MrSlot* w = live_slot(key, owner);
  if (!w || w->kind != KeyKind::kWindowType2 || w->pd_id != pd_id || w->bound_qpn != qpn ||
      w->parent_key == 0)
    return false;
  rebind(*w, key, key, [](MrSlot& s) {
    s.parent_key = 0;
    s.bound_qpn = 0;
    s.iova = s.length = 0;
    s.access = 0;
  });
  return true;
}

void release_window(uint32_t key) {
  uint32_t current = 0;
  MrSlot* w = own_window(key, current);
  if (!w) return;
  rebind(*w, current, 0, [](MrSlot& s) { s.parent_key = 0; });
  slot_word::set(w->state, SlotState::kFree, std::memory_order_release);
}

bool region_has_windows(uint32_t key) {
  const MrSlot* s = Registry::instance().mr_slot(key);
  return s && s->key.load(std::memory_order_acquire) == key &&
         s->windows.load(std::memory_order_relaxed) != 0;
}

}  // namespace softrdma

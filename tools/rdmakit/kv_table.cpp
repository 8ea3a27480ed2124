#include "kv_table.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#include "kv_protocol.hpp"

namespace rdmakit::tool::kv {
namespace {

constexpr uint32_t kKeyOffset = 8;
constexpr uint32_t kStateOffset = 16;
constexpr uint32_t kLengthOffset = 20;

std::atomic_ref<uint64_t> version_at(std::byte* at) noexcept {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(at));
}

// Keeps a slot's data stores between its two version stores for readers that copy the slot
// (one-sided READs). ThreadSanitizer does not model fences and GCC refuses them under it;
// no thread of this process reads a slot while it is written, so there it is left out.
void order_slot_stores() noexcept {
#if !defined(__SANITIZE_THREAD__)
  std::atomic_thread_fence(std::memory_order_release);
#endif
}

}  // namespace

uint64_t mix64(uint64_t x) noexcept {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

TableLayout TableLayout::with_slots(uint64_t slots, uint32_t value_capacity) noexcept {
  TableLayout l;
  l.slots = std::bit_ceil(std::max<uint64_t>(slots, 1));
  l.value_capacity = value_capacity;
  const uint32_t body = kSlotHeaderBytes + (value_capacity + 7) / 8 * 8 + 8;
  l.slot_bytes = (body + 63) / 64 * 64;
  return l;
}

TableLayout TableLayout::for_keys(uint64_t keys, uint32_t value_capacity) noexcept {
  return with_slots(keys + keys / 2 + 1, value_capacity);
}

KvTable::KvTable(std::span<std::byte> memory, TableLayout layout) noexcept
    : memory_(memory.first(layout.bytes())), layout_(layout) {}

std::optional<uint64_t> KvTable::find(uint64_t key) const noexcept {
  const uint64_t mask = layout_.slots - 1;
  uint64_t index = home_slot(key, layout_.slots);
  for (uint64_t probes = 0; probes < layout_.slots; ++probes, index = (index + 1) & mask) {
    const std::byte* s = slot(index);
    const auto state = static_cast<SlotState>(load_le(s + kStateOffset, 4));
    if (state == SlotState::empty) return std::nullopt;
    if (state == SlotState::used && load_le(s + kKeyOffset, 8) == key) return index;
  }
  return std::nullopt;
}

std::optional<std::span<const std::byte>> KvTable::get(uint64_t key) const noexcept {
  const std::optional<uint64_t> index = find(key);
  if (!index) return std::nullopt;
  const std::byte* s = slot(*index);
  return std::span<const std::byte>(s + kSlotHeaderBytes, load_le(s + kLengthOffset, 4));
}

void KvTable::write_slot(uint64_t index, SlotState state, uint64_t key,
                         std::span<const std::byte> value) noexcept {
  std::byte* s = slot(index);
  auto head = version_at(s);
  auto tail = version_at(s + layout_.tail_offset());
  const uint64_t version = head.load(std::memory_order_relaxed);
  tail.store(version + 1, std::memory_order_relaxed);  // odd: a write is under way
  order_slot_stores();
  store_le(s + kKeyOffset, key, 8);
  store_le(s + kStateOffset, static_cast<uint32_t>(state), 4);
  store_le(s + kLengthOffset, value.size(), 4);
  if (!value.empty()) std::memcpy(s + kSlotHeaderBytes, value.data(), value.size());
  order_slot_stores();
  head.store(version + 2, std::memory_order_relaxed);
  tail.store(version + 2, std::memory_order_release);
}

KvTable::PutResult KvTable::put(uint64_t key, std::span<const std::byte> value) noexcept {
  if (value.size() > layout_.value_capacity) return PutResult::too_large;
  const uint64_t mask = layout_.slots - 1;
  uint64_t index = home_slot(key, layout_.slots);
  std::optional<uint64_t> free;  // the first tombstone or empty slot on the key's path
  for (uint64_t probes = 0; probes < layout_.slots; ++probes, index = (index + 1) & mask) {
    const std::byte* s = slot(index);
    const auto state = static_cast<SlotState>(load_le(s + kStateOffset, 4));
    if (state == SlotState::used) {
      if (load_le(s + kKeyOffset, 8) != key) continue;
      write_slot(index, SlotState::used, key, value);
      return PutResult::updated;
    }
    if (!free) free = index;
    if (state == SlotState::empty) break;  // the key is not further on
  }
  if (!free) return PutResult::full;
  write_slot(*free, SlotState::used, key, value);
  ++live_;
  return PutResult::inserted;
}

bool KvTable::erase(uint64_t key) noexcept {
  const std::optional<uint64_t> index = find(key);
  if (!index) return false;
  write_slot(*index, SlotState::erased, key, {});
  --live_;
  return true;
}

SlotView inspect_slot(std::span<const std::byte> copy, const TableLayout& layout) noexcept {
  SlotView view;
  if (copy.size() != layout.slot_bytes) return view;  // torn: not a slot at all
  const uint64_t head = load_le(copy.data(), 8);
  const uint64_t tail = load_le(copy.data() + layout.tail_offset(), 8);
  if (head != tail || head % 2 != 0) return view;
  view.version = head;
  const uint64_t state = load_le(copy.data() + kStateOffset, 4);
  view.key = load_le(copy.data() + kKeyOffset, 8);
  const uint64_t length = load_le(copy.data() + kLengthOffset, 4);
  switch (state) {
    case static_cast<uint32_t>(SlotState::empty):
      view.kind = SlotView::Kind::empty;
      break;
    case static_cast<uint32_t>(SlotState::erased):
      view.kind = SlotView::Kind::erased;
      break;
    case static_cast<uint32_t>(SlotState::used):
      if (length > layout.value_capacity) {
        view.kind = SlotView::Kind::corrupt;
        break;
      }
      view.kind = SlotView::Kind::used;
      view.value = copy.subspan(kSlotHeaderBytes, length);
      break;
    default:
      view.kind = SlotView::Kind::corrupt;
  }
  return view;
}

}  // namespace rdmakit::tool::kv

// The calls a session has in flight: a slab of `window` slots. A call id is the slot index
// and a generation that changes whenever the slot is freed, so a late, repeated or forged
// response never completes another call.
#pragma once

#include <cstdint>
#include <vector>

#include "rdmakit/rpc/endpoint.hpp"

namespace rdmakit::rpc::detail {

inline constexpr uint32_t kSlotBits = 16;
inline constexpr uint32_t kMaxWindow = (1u << kSlotBits) - 1;

constexpr uint32_t make_call_id(uint32_t slot, uint32_t generation) noexcept {
  return (generation << kSlotBits) | slot;
}
constexpr uint32_t slot_of(uint32_t call_id) noexcept {
  return call_id & ((1u << kSlotBits) - 1);
}
constexpr uint32_t generation_of(uint32_t call_id) noexcept {
  return call_id >> kSlotBits;
}

enum class SlotState : uint8_t {
  free,
  pending,     // waiting for its response
  orphaned,    // completed for the caller (timeout, cancel); its response may still arrive, and
               // keeps its reply space and window slot until it does
  cancelling,  // cancel() asked; completes with Code::cancelled at the next poll()
};

struct CallSlot {
  uint64_t user_data = 0;
  CallAwaitable* awaiter = nullptr;
  Clock::time_point deadline = Clock::time_point::max();
  uint32_t reservation = 0;  // reply space held in our incoming response space
  uint32_t max_response = 0;
  uint16_t generation = 0;
  SlotState state = SlotState::free;
  uint32_t next_free = 0;
};

class CallSlab {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  explicit CallSlab(uint32_t window) : slots_(window) {
    for (uint32_t i = 0; i < window; ++i) slots_[i].next_free = i + 1 < window ? i + 1 : kNone;
    free_head_ = window > 0 ? 0 : kNone;
  }
  bool full() const noexcept { return free_head_ == kNone; }
  /// Takes a free slot (the slab must not be full).
  uint32_t take() noexcept {
    const uint32_t slot = free_head_;
    free_head_ = slots_[slot].next_free;
    ++in_use_;
    return slot;
  }
  void free(uint32_t slot) noexcept {
    CallSlot& s = slots_[slot];
    s.state = SlotState::free;
    s.awaiter = nullptr;
    s.deadline = Clock::time_point::max();
    ++s.generation;
    s.next_free = free_head_;
    free_head_ = slot;
    --in_use_;
  }
  /// The slot a response's call id names, when it is still waiting for that response.
  CallSlot* find(uint32_t call_id) noexcept {
    const uint32_t slot = slot_of(call_id);
    if (slot >= slots_.size()) return nullptr;
    CallSlot& s = slots_[slot];
    if (s.state == SlotState::free || s.generation != static_cast<uint16_t>(generation_of(call_id)))
      return nullptr;
    return &s;
  }
  CallSlot& operator[](uint32_t slot) noexcept { return slots_[slot]; }
  uint32_t size() const noexcept { return static_cast<uint32_t>(slots_.size()); }
  uint32_t in_use() const noexcept { return in_use_; }
  uint32_t id_of(uint32_t slot) const noexcept {
    return make_call_id(slot, slots_[slot].generation);
  }

 private:
  std::vector<CallSlot> slots_;
  uint32_t free_head_ = kNone;
  uint32_t in_use_ = 0;
};

}  // namespace rdmakit::rpc::detail

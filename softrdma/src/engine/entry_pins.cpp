#include "engine/entry_pins.hpp"

#include "common/current_pid.hpp"

namespace softrdma {
namespace {

constexpr uint64_t kPinsMask = 0xffffffffu;

uint64_t pid_bits(pid_t pid) {
  return uint64_t{static_cast<uint32_t>(pid)} << 32;
}

}  // namespace

void EntryPins::pin() {
  const uint64_t me = pid_bits(current_pid());
  // The first place that is this process's or free: a process may hold several (its pins are
  // the sum), so a pin need not look past it. Each failed exchange means another pinner
  // changed the line: the loop ends once they do not.
  for (;;) {
    bool raced = false;
    for (int i = 0; i < kNamed && !raced; ++i) {
      uint64_t word = named[i].load(std::memory_order_relaxed);
      const bool ours = (word & ~kPinsMask) == me && (word & kPinsMask) != kPinsMask;
      if (!ours && word != 0) continue;
      if (named[i].compare_exchange_strong(word, ours ? word + 1 : me | 1,
                                           std::memory_order_seq_cst))
        return;
      raced = true;
    }
    if (raced) continue;
    unnamed.fetch_add(1, std::memory_order_seq_cst);
    return;
  }
}

void EntryPins::unpin() {
  const uint64_t me = pid_bits(current_pid());
  for (;;) {
    bool raced = false;
    for (int i = 0; i < kNamed && !raced; ++i) {
      uint64_t word = named[i].load(std::memory_order_relaxed);
      if ((word & ~kPinsMask) != me || (word & kPinsMask) == 0) continue;
      const uint64_t fewer = (word & kPinsMask) == 1 ? 0 : word - 1;
      if (named[i].compare_exchange_strong(word, fewer, std::memory_order_release)) return;
      raced = true;
    }
    if (raced) continue;
    // Not under our name: taken while every place was held by others.
    unnamed.fetch_sub(1, std::memory_order_release);
    return;
  }
}

bool EntryPins::drained_but_for_the_dead() {
  if (unnamed.load(std::memory_order_acquire) != 0) return false;
  for (auto& place : named) {
    uint64_t word = place.load(std::memory_order_acquire);
    if (word == 0) continue;
    if (!pid_exited(static_cast<pid_t>(word >> 32))) return false;
    // A process that exited accesses nothing; its pins would never drop.
    place.compare_exchange_strong(word, 0, std::memory_order_relaxed);
  }
  return true;
}

}  // namespace softrdma

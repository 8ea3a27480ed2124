// The key-value table of `rdmakit kv`: open addressing with linear probing over fixed-size
// slots, in memory the server registered, so that clients can also read slots themselves
// with RDMA READ. One thread writes it (the server's); any number of readers may copy slots
// concurrently, in address order (as RDMA READ and memcpy do).
//
// Slot layout (little-endian, 64-byte aligned):
//   0        head version   \  a seqlock split in two: a writer sets tail odd, writes the
//   8        key             | body, then sets head and tail to the next even version. A copy
//   16       state           | whose head equals its tail and is even was not overlapped by
//   20       length          | any write (an overlapping write makes the tail it read newer
//   24       value           | than the head), so its body is one the slot held.
//   tail     tail version   /
// A deleted key leaves a tombstone (state erased) that probes step over and inserts reuse.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace rdmakit::tool::kv {

enum class SlotState : uint32_t { empty = 0, used = 1, erased = 2 };

struct TableLayout {
  uint64_t slots = 0;  // a power of two
  uint32_t slot_bytes = 0;
  uint32_t value_capacity = 0;

  uint32_t tail_offset() const noexcept { return slot_bytes - 8; }
  size_t bytes() const noexcept { return static_cast<size_t>(slots) * slot_bytes; }
  // A table of `slots` slots (rounded up to a power of two) for values up to `capacity`.
  static TableLayout with_slots(uint64_t slots, uint32_t value_capacity) noexcept;
  // Room for `keys` keys at a load factor of at most 2/3.
  static TableLayout for_keys(uint64_t keys, uint32_t value_capacity) noexcept;
};

inline constexpr uint32_t kSlotHeaderBytes = 24;

// splitmix64's finalizer: the hash of keys, and the mixer of the workload's values.
uint64_t mix64(uint64_t x) noexcept;
inline uint64_t home_slot(uint64_t key, uint64_t slots) noexcept {
  return mix64(key) & (slots - 1);
}

class KvTable {
 public:
  // `memory`: zero-filled, 8-byte aligned, at least layout.bytes().
  KvTable(std::span<std::byte> memory, TableLayout layout) noexcept;

  // The value of `key`, in the table (valid until the next write).
  std::optional<std::span<const std::byte>> get(uint64_t key) const noexcept;

  enum class PutResult { inserted, updated, full, too_large };
  PutResult put(uint64_t key, std::span<const std::byte> value) noexcept;
  // False when the key was not there.
  bool erase(uint64_t key) noexcept;

  uint64_t size() const noexcept { return live_; }
  const TableLayout& layout() const noexcept { return layout_; }

 private:
  std::byte* slot(uint64_t index) const noexcept {
    return memory_.data() + index * layout_.slot_bytes;
  }
  // The slot holding `key`, if any.
  std::optional<uint64_t> find(uint64_t key) const noexcept;
  // Writes a slot under its seqlock.
  void write_slot(uint64_t index, SlotState state, uint64_t key,
                  std::span<const std::byte> value) noexcept;

  std::span<std::byte> memory_;
  TableLayout layout_;
  uint64_t live_ = 0;
};

// What a reader finds in a copy of one slot.
struct SlotView {
  enum class Kind { torn, empty, erased, used, corrupt } kind = Kind::torn;
  uint64_t key = 0;
  std::span<const std::byte> value;  // into the copy
  uint64_t version = 0;
};
SlotView inspect_slot(std::span<const std::byte> copy, const TableLayout& layout) noexcept;

}  // namespace rdmakit::tool::kv

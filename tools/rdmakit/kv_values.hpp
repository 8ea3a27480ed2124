// The values `rdmakit kv` writes: derived from the key and a stamp (which writer, its how-
// manyth write), so that a reader can tell from the bytes alone whether they are a value
// that this key was given, and by which write.
//   word 0: stamp ^ mix(key)          word 1: key ^ mix(stamp)
//   rest:   a pseudo-random stream seeded by (key, stamp)
// An 8-byte value is word 0 alone: a value of another key then decodes to a stamp no writer
// issued, which the history check (kv_check) refuses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace rdmakit::tool::kv {

inline constexpr unsigned kSeqBits = 40;

inline uint64_t make_stamp(uint32_t writer, uint64_t seq) noexcept {
  return (uint64_t{writer} << kSeqBits) | seq;
}
inline uint32_t writer_of(uint64_t stamp) noexcept {
  return static_cast<uint32_t>(stamp >> kSeqBits);
}
inline uint64_t seq_of(uint64_t stamp) noexcept {
  return stamp & ((uint64_t{1} << kSeqBits) - 1);
}

// Fills `out` (at least 8 bytes) with the value of `key` written with `stamp`.
void fill_value(uint64_t key, uint64_t stamp, std::span<std::byte> out) noexcept;
// The stamp `value` was written with, if its bytes are exactly fill_value(key, stamp) of
// its size.
std::optional<uint64_t> value_stamp(uint64_t key, std::span<const std::byte> value) noexcept;

}  // namespace rdmakit::tool::kv

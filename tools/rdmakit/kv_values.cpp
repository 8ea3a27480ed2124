#include "kv_values.hpp"

#include <algorithm>

#include "kv_protocol.hpp"
#include "kv_table.hpp"

namespace rdmakit::tool::kv {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// Words 2.. of the value: calls `word(offset, bytes)` for each, with the stream's word.
template <typename Each>
void stream(uint64_t key, uint64_t stamp, size_t size, Each&& each) {
  uint64_t state = mix64(key ^ (stamp * kGolden));
  for (size_t offset = 16; offset < size; offset += 8) {
    state += kGolden;
    each(offset, std::min<size_t>(8, size - offset), mix64(state));
  }
}

}  // namespace

void fill_value(uint64_t key, uint64_t stamp, std::span<std::byte> out) noexcept {
  std::byte* p = out.data();
  store_le(p, stamp ^ mix64(key), std::min<size_t>(8, out.size()));
  if (out.size() > 8) store_le(p + 8, key ^ mix64(stamp), std::min<size_t>(8, out.size() - 8));
  stream(key, stamp, out.size(),
         [&](size_t offset, size_t bytes, uint64_t word) { store_le(p + offset, word, bytes); });
}

std::optional<uint64_t> value_stamp(uint64_t key, std::span<const std::byte> value) noexcept {
  if (value.size() < 8) return std::nullopt;
  const std::byte* p = value.data();
  const uint64_t stamp = load_le(p, 8) ^ mix64(key);
  if (value.size() > 8) {
    const size_t bytes = std::min<size_t>(8, value.size() - 8);
    const uint64_t mask = bytes == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * bytes)) - 1;
    if (load_le(p + 8, bytes) != ((key ^ mix64(stamp)) & mask)) return std::nullopt;
  }
  bool same = true;
  stream(key, stamp, value.size(), [&](size_t offset, size_t bytes, uint64_t word) {
    const uint64_t mask = bytes == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * bytes)) - 1;
    same = same && load_le(p + offset, bytes) == (word & mask);
  });
  if (!same) return std::nullopt;
  return stamp;
}

}  // namespace rdmakit::tool::kv

#include "rc/payload_pool.hpp"

#include <bit>

namespace rdmakit::rpc::detail::rc {

size_t PayloadPool::class_of(size_t bytes) noexcept {
  const size_t width = std::bit_width(std::max<size_t>(bytes, 1) - 1);  // log2, rounded up
  return width <= kSmallestClass ? 0 : width - kSmallestClass;
}

RawRegion PayloadPool::take(size_t bytes, std::error_code& error) {
  const size_t c = class_of(bytes);
  if (c >= kClasses) {
    error = std::make_error_code(std::errc::value_too_large);
    return {};
  }
  Kept& kept = free_[c];
  if (kept.count > 0) return std::move(kept.regions[--kept.count]);
  return RawRegion(*pd_, size_t{1} << (c + kSmallestClass), access_, error);
}

void PayloadPool::give_back(RawRegion region) noexcept {
  if (!region) return;
  Kept& kept = free_[class_of(region.size())];
  if (kept.count < kKeptPerClass) kept.regions[kept.count++] = std::move(region);
  // else: `region` is unmapped here
}

size_t PayloadPool::idle_bytes() const noexcept {
  size_t total = 0;
  for (const Kept& kept : free_)
    for (size_t i = 0; i < kept.count; ++i) total += kept.regions[i].size();
  return total;
}

}  // namespace rdmakit::rpc::detail::rc

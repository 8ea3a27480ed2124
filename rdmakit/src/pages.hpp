// The system page size, the unit in which memory is mapped and registered.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace rdmakit::detail {

inline size_t page_size() noexcept {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

inline size_t round_up_to_page(size_t bytes) noexcept {
  return (bytes + page_size() - 1) / page_size() * page_size();
}

inline uintptr_t round_down_to_page(uintptr_t address) noexcept {
  return address / page_size() * page_size();
}

}  // namespace rdmakit::detail

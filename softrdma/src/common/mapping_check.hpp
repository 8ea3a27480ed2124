// Questions about this process's address space: mincore for "is it mapped", and for the
// rights, the backing file and the name of each mapping, the PROCMAP_QUERY ioctl on
// /proc/self/maps (Linux 6.11), one binary answer per mapping, or on older kernels the
// text of /proc/self/maps, which the kernel formats in full on every read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

namespace softrdma {

// True if every page of [start, start+length) is mapped in this process (mincore: cheap,
// no /proc read); says nothing of the rights.
bool range_is_mapped(uintptr_t start, size_t length);

// One mapping (a VMA) as the kernel describes it.
struct Mapping {
  bool readable = false;
  bool writable = false;
  bool shared = false;
  unsigned long inode = 0;  // of the backing file, 0 for anonymous memory
  std::string_view name;    // path or "[heap]", "[stack]"...; empty for plain anonymous memory
};

// True if [start, end) is covered, without holes, by mappings every one of which `accepts`
// (called in address order; `name` is filled only `with_names`).
bool mappings_cover(uintptr_t start, uintptr_t end,
                    const std::function<bool(const Mapping&)>& accepts, bool with_names = false);

// True if every byte of [start, end) is mapped readable, and writable when `need_write`:
// what pinning the pages for a registration would check on a NIC.
bool mapped_with_access(uintptr_t start, uintptr_t end, bool need_write);

}  // namespace softrdma

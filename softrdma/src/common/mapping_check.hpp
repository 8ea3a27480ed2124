// Questions about this process's address space, answered from /proc/self/maps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace softrdma {

// True if every page of [start, start+length) is mapped in this process (mincore: cheap,
// no /proc read); says nothing of the rights.
bool range_is_mapped(uintptr_t start, size_t length);

// One mapping as /proc/self/maps describes it.
struct MappingLine {
  const char* perms;    // "rw-p", "r--s", ...
  unsigned long inode;  // of the backing file, 0 for anonymous memory
};

// True if [start, end) is covered, without holes, by mappings every one of which `accepts`.
bool mappings_cover(uintptr_t start, uintptr_t end,
                    const std::function<bool(const MappingLine&)>& accepts);

// True if every byte of [start, end) is mapped readable, and writable when `need_write`:
// what pinning the pages for a registration would check on a NIC.
bool mapped_with_access(uintptr_t start, uintptr_t end, bool need_write);

}  // namespace softrdma

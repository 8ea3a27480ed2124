#include "common/mapping_check.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace softrdma {

bool range_is_mapped(uintptr_t start, size_t length) {
  if (length == 0) return true;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t end = start + length;
  if (end < start) return false;
  unsigned char resident[256];  // one byte per page; mincore fails (ENOMEM) on a hole
  for (uintptr_t at = start & ~(page - 1); at < end;) {
    const uintptr_t span = std::min<uintptr_t>(end - at + (page - 1), sizeof resident * page);
    if (mincore(reinterpret_cast<void*>(at), span & ~(page - 1), resident) != 0) return false;
    at += span & ~(page - 1);
  }
  return true;
}

bool mappings_cover(uintptr_t start, uintptr_t end,
                    const std::function<bool(const MappingLine&)>& accepts) {
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return false;
  uintptr_t covered = start;
  char line[512];
  while (covered < end && std::fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0, inode = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%lx-%lx %7s %*s %*s %lu", &lo, &hi, perms, &inode) != 4) continue;
    if (hi <= covered) continue;
    if (lo > covered) break;  // a hole: the maps are sorted by address
    if (!accepts(MappingLine{perms, inode})) break;
    covered = hi;
  }
  std::fclose(maps);
  return covered >= end;
}

bool mapped_with_access(uintptr_t start, uintptr_t end, bool need_write) {
  return mappings_cover(start, end, [need_write](const MappingLine& m) {
    return m.perms[0] == 'r' && (!need_write || m.perms[1] == 'w');
  });
}

}  // namespace softrdma

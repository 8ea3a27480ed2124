#include "common/mapping_check.hpp"

#include <cstdio>

namespace softrdma {

bool mapped_with_access(uintptr_t start, uintptr_t end, bool need_write) {
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return false;
  uintptr_t covered = start;
  char line[512];
  while (covered < end && std::fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
    if (hi <= covered) continue;
    if (lo > covered) break;  // a hole: the maps are sorted by address
    if (perms[0] != 'r' || (need_write && perms[1] != 'w')) break;
    covered = hi;
  }
  std::fclose(maps);
  return covered >= end;
}

}  // namespace softrdma

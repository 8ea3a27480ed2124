#include "common/mapping_check.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>

#include "common/env_switch.hpp"

namespace softrdma {
namespace {

// The PROCMAP_QUERY interface of <linux/fs.h> (Linux 6.11), which Debian 12's headers lack.
struct ProcmapQuery {
  uint64_t size;
  uint64_t query_flags;
  uint64_t query_addr;
  uint64_t vma_start;
  uint64_t vma_end;
  uint64_t vma_flags;
  uint64_t vma_page_size;
  uint64_t vma_offset;
  uint64_t inode;
  uint32_t dev_major;
  uint32_t dev_minor;
  uint32_t vma_name_size;
  uint32_t build_id_size;
  uint64_t vma_name_addr;
  uint64_t build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104, "the kernel's struct procmap_query, version 1");
constexpr unsigned long kProcmapQuery = 0xC0686611;  // _IOWR('f', 17, struct procmap_query)
constexpr uint64_t kVmaReadable = 0x01;
constexpr uint64_t kVmaWritable = 0x02;
constexpr uint64_t kVmaShared = 0x08;

// Cleared for good once the kernel refuses the ioctl (older than 6.11, or a sandbox).
// SOFTRDMA_PROCMAP_QUERY=0 starts without it, as such a kernel would (the tests' way to run
// the text parser).
std::atomic<bool> g_query_works{!switched_off("SOFTRDMA_PROCMAP_QUERY")};

enum class Walk { kCovered, kNotCovered, kUnanswered };

// Asks the kernel for the mapping holding each address from `start` on.
Walk cover_by_query(uintptr_t start, uintptr_t end,
                    const std::function<bool(const Mapping&)>& accepts, bool with_names) {
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Walk::kUnanswered;
  char name[PATH_MAX];
  Walk result = Walk::kCovered;
  for (uintptr_t covered = start; covered < end;) {
    ProcmapQuery q{};
    q.size = sizeof q;
    q.query_addr = covered;  // flags 0: only the mapping holding it, so a hole says ENOENT
    if (with_names) {
      q.vma_name_addr = reinterpret_cast<uintptr_t>(name);
      q.vma_name_size = sizeof name;
    }
    if (ioctl(fd, kProcmapQuery, &q) != 0) {
      if (errno == ENOENT) {
        result = Walk::kNotCovered;  // a hole
      } else {
        // ENOTTY or EINVAL from an older kernel, or a sandbox's refusal: the text it is.
        g_query_works.store(false, std::memory_order_relaxed);
        result = Walk::kUnanswered;
      }
      break;
    }
    Mapping m;
    m.readable = q.vma_flags & kVmaReadable;
    m.writable = q.vma_flags & kVmaWritable;
    m.shared = q.vma_flags & kVmaShared;
    m.inode = q.inode;
    if (with_names && q.vma_name_size > 0) m.name = std::string_view(name, q.vma_name_size - 1);
    if (!accepts(m)) {
      result = Walk::kNotCovered;
      break;
    }
    covered = q.vma_end;
  }
  close(fd);
  return result;
}

// Reads the text of /proc/self/maps (sorted by address) line by line.
bool cover_by_text(uintptr_t start, uintptr_t end,
                   const std::function<bool(const Mapping&)>& accepts) {
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return false;
  uintptr_t covered = start;
  char line[PATH_MAX + 128];
  while (covered < end && std::fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0, inode = 0;
    char perms[8] = {};
    int path_at = 0;
    if (std::sscanf(line, "%lx-%lx %7s %*s %*s %lu %n", &lo, &hi, perms, &inode, &path_at) < 4)
      continue;
    if (hi <= covered) continue;
    if (lo > covered) break;  // a hole
    std::string_view path(line + path_at);
    if (!path.empty() && path.back() == '\n') path.remove_suffix(1);
    const Mapping m{perms[0] == 'r', perms[1] == 'w', perms[3] == 's', inode, path};
    if (!accepts(m)) break;
    covered = hi;
  }
  std::fclose(maps);
  return covered >= end;
}

}  // namespace

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
                    const std::function<bool(const Mapping&)>& accepts, bool with_names) {
  if (g_query_works.load(std::memory_order_relaxed)) {
    const Walk w = cover_by_query(start, end, accepts, with_names);
    if (w != Walk::kUnanswered) return w == Walk::kCovered;
    // Refused (in practice at the first question): the text walk starts again from `start`.
  }
  return cover_by_text(start, end, accepts);
}

bool mapped_with_access(uintptr_t start, uintptr_t end, bool need_write) {
  return mappings_cover(start, end, [need_write](const Mapping& m) {
    return m.readable && (!need_write || m.writable);
  });
}

}  // namespace softrdma

#include "engine/shared_pages.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "common/log.hpp"
#include "common/mapping_check.hpp"

namespace softrdma {
namespace {

constexpr char kMemfdName[] = "softrdma-mr";

uintptr_t page_size() {
  static const auto p = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return p;
}

// Ranges of this process already moved onto a memfd: start -> (length, fd).
struct MovedRange {
  size_t length;
  int fd;
  uint64_t serial;
  int registrations;
};
// The maps below are never destroyed: helper threads may still use them while exit() runs.
std::mutex g_moved_mutex;
auto& g_moved = *new std::map<uintptr_t, MovedRange>();
uint64_t g_last_serial = 0;  // of the memfds made so far (under g_moved_mutex)

// True while all of [start, start + length) is still mapped from `fd` (the user may have
// unmapped it while it was registered).
bool still_mapped_from(uintptr_t start, size_t length, int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return false;
  return mappings_cover(start, start + length,
                        [&st](const Mapping& m) { return m.inode == st.st_ino; });
}

// Protection of [start, end) if it is private anonymous memory (heap or anonymous mmap) in
// one or more consecutive mappings, else -1.
int private_anonymous_protection(uintptr_t start, uintptr_t end) {
  int prot = -1;
  const bool covered = mappings_cover(
      start, end,
      [&prot](const Mapping& m) {
        if (m.shared || m.inode != 0 || !(m.name.empty() || m.name == "[heap]")) return false;
        const int p = (m.readable ? PROT_READ : 0) | (m.writable ? PROT_WRITE : 0);
        if (prot != -1 && p != prot) return false;
        prot = p;
        return true;
      },
      /*with_names=*/true);
  return covered ? prot : -1;
}

// Calls copy(offset, bytes) for each run of pages of [start, start + length) that hold
// data: present or swapped out (/proc/self/pagemap). A page never touched reads as zeros,
// as does the memfd's hole in its place: copying it would fault in the zero page and give
// the memfd a page for nothing (a freshly mapped region copies nothing at all). Pages the
// pagemap does not describe are copied.
template <typename Copy>
bool for_each_populated_run(uintptr_t start, size_t length, Copy copy) {
  constexpr uint64_t kPresent = uint64_t{1} << 63, kSwapped = uint64_t{1} << 62;
  const int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  const size_t pages = length / page_size();
  uint64_t entries[512];
  size_t run_from = 0, run_pages = 0;
  bool ok = true;
  for (size_t first = 0; ok && first < pages; first += std::size(entries)) {
    const size_t count = std::min(pages - first, std::size(entries));
    const auto bytes = static_cast<ssize_t>(count * sizeof(uint64_t));
    const auto at = static_cast<off_t>((start / page_size() + first) * sizeof(uint64_t));
    if (pagemap < 0 || pread(pagemap, entries, static_cast<size_t>(bytes), at) != bytes)
      std::fill_n(entries, count, kPresent);
    for (size_t i = 0; ok && i < count; ++i) {
      if (entries[i] & (kPresent | kSwapped)) {
        if (run_pages++ == 0) run_from = first + i;
      } else if (run_pages > 0) {
        ok = copy(run_from * page_size(), run_pages * page_size());
        run_pages = 0;
      }
    }
  }
  if (pagemap >= 0) close(pagemap);
  return ok && (run_pages == 0 || copy(run_from * page_size(), run_pages * page_size()));
}

}  // namespace

std::optional<SharedPages> share_pages(void* addr, size_t length) {
  const auto start = reinterpret_cast<uintptr_t>(addr);
  // Only whole pages: a page shared with other data could lose a concurrent write while
  // it moves, and would become shared with a forked child.
  if (start % page_size() || length % page_size() || length == 0) return std::nullopt;
  std::lock_guard lock(g_moved_mutex);
  // Already moved (another registration of the same memory)?
  auto it = g_moved.upper_bound(start);
  if (it != g_moved.begin()) {
    --it;
    if (start >= it->first && start + length <= it->first + it->second.length) {
      ++it->second.registrations;
      return SharedPages{it->second.fd, it->second.serial, start - it->first};
    }
    if (start < it->first + it->second.length) return std::nullopt;  // partial overlap
  }
  if (auto next = g_moved.lower_bound(start); next != g_moved.end() && next->first < start + length)
    return std::nullopt;
  const int prot = private_anonymous_protection(start, start + length);
  if (prot != (PROT_READ | PROT_WRITE)) return std::nullopt;

  int fd = static_cast<int>(syscall(SYS_memfd_create, kMemfdName, MFD_CLOEXEC));
  if (fd < 0) return std::nullopt;
  // Copy the current contents, then put the memfd in place of the anonymous pages.
  bool ok = ftruncate(fd, static_cast<off_t>(length)) == 0 &&
            for_each_populated_run(start, length, [&](size_t offset, size_t bytes) {
              for (size_t done = 0; done < bytes;) {
                const ssize_t n = pwrite(fd, reinterpret_cast<char*>(start + offset + done),
                                         bytes - done, static_cast<off_t>(offset + done));
                if (n <= 0) return false;
                done += static_cast<size_t>(n);
              }
              return true;
            });
  if (!ok || mmap(addr, length, prot, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    SOFTRDMA_DEBUG_LOG("cannot share registered pages: %s", std::strerror(errno));
    close(fd);
    return std::nullopt;
  }
  const uint64_t serial = ++g_last_serial;
  g_moved.emplace(start, MovedRange{length, fd, serial, 1});
  return SharedPages{fd, serial, 0};
}

void unshare_pages(void* addr, size_t length) {
  const auto start = reinterpret_cast<uintptr_t>(addr);
  std::lock_guard lock(g_moved_mutex);
  auto it = g_moved.upper_bound(start);
  if (it == g_moved.begin()) return;
  --it;
  MovedRange& range = it->second;
  if (start + length > it->first + range.length || --range.registrations > 0) return;
  // Unless the user unmapped it meanwhile, put a private copy where the shared pages are;
  // mremap swaps the mappings in one step, so the contents never vanish.
  const uintptr_t base = it->first;
  if (still_mapped_from(base, range.length, range.fd)) {
    void* copy =
        mmap(nullptr, range.length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    // Read the pages through the memfd, not through the user's mapping: the user may have
    // freed the memory already (deregistering after free is allowed), and the library must
    // not touch memory it does not own.
    // Only the memfd's data: its holes (pages nobody touched) stay untouched zeros here too.
    bool copied = copy != MAP_FAILED;
    const auto end = static_cast<off_t>(range.length);
    for (off_t data = 0; copied && data < end;) {
      data = lseek(range.fd, data, SEEK_DATA);
      if (data < 0) {
        copied = errno == ENXIO;  // no data after `data`
        break;
      }
      const off_t hole = std::min(lseek(range.fd, data, SEEK_HOLE), end);
      copied = hole > data;
      // Every page of the extent is written next: populated in one call, not a fault each
      // (a kernel without MADV_POPULATE_WRITE faults them in as before).
      if (copied)
        madvise(static_cast<char*>(copy) + data, static_cast<size_t>(hole - data),
                MADV_POPULATE_WRITE);
      for (; copied && data < hole;) {
        const ssize_t n = pread(range.fd, static_cast<char*>(copy) + data,
                                static_cast<size_t>(hole - data), data);
        copied = n > 0;
        if (copied) data += n;
      }
    }
    if (copied && mremap(copy, range.length, range.length, MREMAP_MAYMOVE | MREMAP_FIXED,
                         reinterpret_cast<void*>(base)) == MAP_FAILED) {
      SOFTRDMA_DEBUG_LOG("cannot make deregistered pages private: %s", std::strerror(errno));
      copied = false;
    }
    if (!copied && copy != MAP_FAILED) munmap(copy, range.length);
  }
  close(range.fd);
  g_moved.erase(it);
}

namespace {

struct PeerPages {
  char* base;
  uint64_t bytes;
  uint64_t serial;
};

struct PeerKey {
  pid_t pid;
  uint64_t start_time;
  int fd;
  bool operator<(const PeerKey& o) const {
    return std::tie(pid, start_time, fd) < std::tie(o.pid, o.start_time, o.fd);
  }
};

std::mutex g_peer_mutex;
auto& g_peer_pages = *new std::map<PeerKey, PeerPages>();

}  // namespace

char* map_peer_pages(const ProcessId& owner, int fd, uint64_t serial, uint64_t bytes) {
  // The last mapping this thread used: one-sided traffic mostly goes to one region.
  thread_local PeerKey last_key{0, 0, -1};
  thread_local PeerPages last{nullptr, 0, 0};
  if (last_key.pid == owner.pid && last_key.start_time == owner.start_time && last_key.fd == fd &&
      last.serial == serial && last.bytes >= bytes)
    return last.base;
  std::lock_guard lock(g_peer_mutex);
  const PeerKey key{owner.pid, owner.start_time, fd};
  auto it = g_peer_pages.find(key);
  if (it != g_peer_pages.end() && it->second.serial != serial) {
    // The owner closed that memfd (its last region was deregistered, which waited for every
    // access to drain) and the number now names another: the old mapping has no users left.
    munmap(it->second.base, it->second.bytes);
    g_peer_pages.erase(it);
    it = g_peer_pages.end();
  }
  if (it != g_peer_pages.end()) {
    if (it->second.bytes < bytes) return nullptr;
    last_key = key;
    last = it->second;
    return last.base;
  }
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, owner.pid, 0));
  if (pidfd < 0) return nullptr;
  int local = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0));
  close(pidfd);
  if (local < 0) return nullptr;
  // Map the whole memfd: later regions on the same pages reuse the mapping.
  off_t size = lseek(local, 0, SEEK_END);
  void* p =
      size > 0 && static_cast<uint64_t>(size) >= bytes
          ? mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, local, 0)
          : MAP_FAILED;
  close(local);
  if (p == MAP_FAILED) return nullptr;
  g_peer_pages.emplace(key, PeerPages{static_cast<char*>(p), static_cast<uint64_t>(size), serial});
  return static_cast<char*>(p);
}

}  // namespace softrdma

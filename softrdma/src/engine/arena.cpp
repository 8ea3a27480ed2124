#include "engine/arena.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <system_error>
#include <unordered_map>

#include "common/background_thread.hpp"
#include "common/current_pid.hpp"
#include "common/log.hpp"

namespace softrdma {
namespace {

constexpr uint64_t kArenaMagic = 0x414e455241534653ull;  // "SFSARENA"
constexpr uint64_t kPage = 4096;
// Pages of a freed block that are cleared and kept rather than given back to tmpfs.
constexpr size_t kKeptPages = 16;

Arena* g_arena = nullptr;
pid_t g_arena_pid = 0;
std::mutex g_arena_mutex;

size_t round_up(size_t n) {
  return (n + Arena::kAlign - 1) & ~(Arena::kAlign - 1);
}

// Starts the thread that holds `life` until the process dies; returns once it is held.
void hold_life_lock(pthread_mutex_t* life) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(life, &attr);
  pthread_mutexattr_destroy(&attr);
  std::promise<void> held;
  start_background_thread("softrdma-arena", [life, &held] {
    pthread_mutex_lock(life);
    held.set_value();
    for (;;) pause();
  });
  held.get_future().wait();
}

}  // namespace

Arena& Arena::self() {
  std::lock_guard lock(g_arena_mutex);
  // A forked child gets its own arena: the inherited one belongs to the parent.
  if (!g_arena || g_arena_pid != current_pid()) {
    g_arena = new Arena();
    g_arena_pid = current_pid();
  }
  return *g_arena;
}

size_t Arena::configured_size() {
  const char* env = std::getenv("SOFTRDMA_ARENA_GIB");
  const long gib = env ? std::atol(env) : 0;
  return gib > 0 && static_cast<size_t>(gib) < (kDefaultSize >> 30) ? static_cast<size_t>(gib) << 30
                                                                    : kDefaultSize;
}

Arena::Arena() {
  const size_t size = configured_size();
  fd_ = static_cast<int>(syscall(SYS_memfd_create, "softrdma-arena", MFD_CLOEXEC));
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "memfd_create");
  if (ftruncate(fd_, static_cast<off_t>(size)) != 0)
    throw std::system_error(errno, std::generic_category(), "ftruncate arena");
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap arena");
  base_ = static_cast<char*>(p);
  auto* h = reinterpret_cast<ArenaHeader*>(base_);
  const ProcessId& me = self_process();
  h->pid = me.pid;
  h->start_time = me.start_time;
  hold_life_lock(&h->life);
  h->magic = kArenaMagic;
  // Offset 0 is the header, so 0 can mean "no object".
  free_.emplace(4096, size - 4096);
}

uint64_t Arena::allocate(size_t bytes, size_t used) {
  bytes = round_up(bytes);
  const uint64_t offset = take(bytes);
  if (offset) populate(offset, std::min({used, bytes, kPopulatedBytes}));
  return offset;
}

uint64_t Arena::take(size_t bytes) {
  std::lock_guard lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const uint64_t off = it->first;
    const size_t rest = it->second - bytes;
    free_.erase(it);
    if (rest) free_.emplace(off + bytes, rest);
    used_.emplace(off, bytes);
    return off;
  }
  return 0;
}

void Arena::free(uint64_t offset) {
  std::lock_guard lock(mutex_);
  auto used = used_.find(offset);
  if (used == used_.end()) return;
  size_t bytes = used->second;
  used_.erase(used);
  zero_range(offset, bytes);
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_.emplace(offset, bytes);
}

void Arena::populate(uint64_t offset, size_t bytes) {
  const uint64_t first = offset & ~(kPage - 1);
  uint64_t last = (offset + bytes + kPage - 1) & ~(kPage - 1);
  {
    std::lock_guard lock(mutex_);
    if (first >= backed_from_ && last <= backed_until_) return;
    if (bytes < kPopulateAhead) last = std::max(last, first + kPopulateAhead);
  }
  // Best effort: before Linux 5.14 (EINVAL) the pages come by faults, as they always did.
  if (madvise(base_ + first, last - first, MADV_POPULATE_WRITE) != 0) return;
  std::lock_guard lock(mutex_);
  backed_from_ = first;
  backed_until_ = last;
}

void Arena::zero_range(uint64_t offset, size_t bytes) {
  const uint64_t first = (offset + kPage - 1) & ~(kPage - 1);
  const uint64_t last = (offset + bytes) & ~(kPage - 1);
  if (last <= first) {
    std::memset(base_ + offset, 0, bytes);
    return;
  }
  std::memset(base_ + offset, 0, first - offset);
  std::memset(base_ + last, 0, offset + bytes - last);
  // A few pages in use are cleared by hand and stay, for the next object here: giving them
  // back to tmpfs and faulting them in again costs a hundred times more than clearing them.
  // Larger regions go back to tmpfs whole (they read as zero afterwards).
  const size_t pages = (last - first) / kPage;
  uint64_t kept_at[kKeptPages];
  size_t kept = 0;
  bool too_many = false;
  for (size_t done = 0; done < pages && !too_many;) {
    unsigned char chunk[4096];  // 16 MiB of pages per call
    const size_t n = std::min(pages - done, sizeof chunk);
    if (mincore(base_ + first + done * kPage, n * kPage, chunk) != 0) {
      too_many = true;  // unknown: give the pages back
      break;
    }
    for (size_t i = 0; i < n; ++i) {
      if (!(chunk[i] & 1)) continue;
      if (kept == kKeptPages) {
        too_many = true;
        break;
      }
      kept_at[kept++] = first + (done + i) * kPage;
    }
    done += n;
  }
  if (too_many) {
    fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(first),
              static_cast<off_t>(last - first));
    if (first < backed_until_ && last > backed_from_) backed_from_ = backed_until_ = 0;
    return;
  }
  for (size_t i = 0; i < kept; ++i) std::memset(base_ + kept_at[i], 0, kPage);
}

PeerArena::PeerArena(ProcessId owner, char* base, size_t mapped_size)
    : owner_(owner), base_(base), mapped_size_(mapped_size) {}

PeerArena::~PeerArena() {
  for (auto& [remote, local] : imported_) close(local);
  if (pidfd_ >= 0) close(pidfd_);
  if (mapped_size_) munmap(base_, mapped_size_);
}

bool PeerArena::owner_alive() const {
  if (is_self()) return true;
  // The robust futex word: the holder's TID while it lives; the kernel clears the TID
  // (and sets FUTEX_OWNER_DIED) when the holder dies.
  const auto* word = reinterpret_cast<const std::atomic<uint32_t>*>(&at<ArenaHeader>(0)->life);
  return (word->load(std::memory_order_acquire) & FUTEX_TID_MASK) != 0;
}

int PeerArena::import_fd(int remote_fd) {
  std::lock_guard lock(mutex_);
  if (auto it = imported_.find(remote_fd); it != imported_.end()) return it->second;
  if (is_self()) return remote_fd;
  if (pidfd_ < 0) pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, owner_.pid, 0));
  if (pidfd_ < 0) return -1;
  int fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd_, remote_fd, 0));
  if (fd < 0) {
    SOFTRDMA_DEBUG_LOG("pidfd_getfd(%d, %d): %s", owner_.pid, remote_fd, strerror(errno));
    return -1;
  }
  imported_.emplace(remote_fd, fd);
  return fd;
}

std::shared_ptr<PeerArena> map_peer_arena(const ProcessId& owner, int arena_fd) {
  static std::mutex mutex;
  // Never destroyed: the CM and listener threads may still resolve peers while exit() runs.
  static auto& peers = *new std::unordered_map<uint64_t, std::shared_ptr<PeerArena>>();
  static pid_t peers_pid = 0;
  std::lock_guard lock(mutex);
  if (peers_pid != current_pid()) {  // mappings made by a parent are not ours to reuse
    peers.clear();
    peers_pid = current_pid();
  }
  const uint64_t key = (static_cast<uint64_t>(owner.pid) << 40) ^ owner.start_time;
  if (auto it = peers.find(key); it != peers.end()) {
    if (it->second->owner() == owner) return it->second;
    peers.erase(it);
  }
  std::shared_ptr<PeerArena> peer;
  if (owner == self_process()) {
    peer = std::make_shared<PeerArena>(owner, Arena::self().base(), 0);
  } else {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/fd/%d", owner.pid, arena_fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return nullptr;
    struct stat st {};
    const size_t size = fstat(fd, &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
    void* p = size >= sizeof(ArenaHeader)
                  ? mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) return nullptr;
    auto* h = static_cast<ArenaHeader*>(p);
    if (h->magic != kArenaMagic || h->pid != owner.pid || h->start_time != owner.start_time) {
      munmap(p, size);
      return nullptr;
    }
    peer = std::make_shared<PeerArena>(owner, static_cast<char*>(p), size);
  }
  peers.emplace(key, peer);
  return peer;
}

}  // namespace softrdma

// Per-process shared memory: the queues and rings that peers write into live here.
//
// Each process that uses softrdma has one arena, a memfd that peers map through
// /proc/<pid>/fd/<fd>. It disappears with the process, so nothing leaks when a process
// dies. Objects are referred to across processes by their offset in the arena.
#pragma once

#include <pthread.h>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "common/process_identity.hpp"

namespace softrdma {

struct ArenaHeader {
  uint64_t magic;
  int32_t pid;
  uint32_t pad;
  uint64_t start_time;
  // Held for the process's whole life by a thread that only sleeps. It is a robust mutex,
  // so the kernel marks it when the process dies: peers see death with a plain load.
  pthread_mutex_t life;
};

class Arena {
 public:
  // Virtual size; tmpfs backs only the pages touched. CQ rings reserve their largest size so
  // that ibv_resize_cq never moves them. SOFTRDMA_ARENA_GIB lowers it for tools that cannot
  // reserve that much address space (valgrind); peers learn it from the memfd's size.
  static constexpr size_t kDefaultSize = size_t{64} << 30;
  static size_t configured_size();
  static constexpr size_t kAlign = 64;

  /// This process's arena, created on first use (and anew in a forked child).
  static Arena& self();

  /// Allocates `bytes` of zeroed shared memory; returns its offset, or 0 when full. The
  /// first `used` bytes (at most kPopulatedBytes) are backed at once, in one system call,
  /// rather than by a page fault per page on first touch (a fault costs ten times more).
  uint64_t allocate(size_t bytes, size_t used = kPopulatedBytes);
  static constexpr size_t kPopulatedBytes = size_t{64} << 10;
  void free(uint64_t offset);

  char* base() const { return base_; }
  int fd() const { return fd_; }
  template <typename T>
  T* at(uint64_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }
  uint64_t offset_of(const void* p) const {
    return static_cast<uint64_t>(static_cast<const char*>(p) - base_);
  }

 private:
  Arena();
  uint64_t take(size_t bytes);
  void zero_range(uint64_t offset, size_t bytes);
  void populate(uint64_t offset, size_t bytes);
  int fd_ = -1;
  // The last range backed ahead of use: allocations inside it need no system call. Small
  // objects come one after another, so backing goes kPopulateAhead beyond them: a page
  // fault costs as much as backing a dozen pages in one call, and a call per object adds up.
  static constexpr uint64_t kPopulateAhead = uint64_t{64} << 10;
  uint64_t backed_from_ = 0;
  uint64_t backed_until_ = 0;
  char* base_ = nullptr;
  std::mutex mutex_;
  std::map<uint64_t, size_t> free_;  // offset -> bytes, coalesced
  std::map<uint64_t, size_t> used_;
};

/// Another process's arena, mapped into this one, plus fds imported from that process.
class PeerArena {
 public:
  // `mapped_size`: bytes of the owner's arena mapped at `base` (0 for our own arena).
  PeerArena(ProcessId owner, char* base, size_t mapped_size);
  ~PeerArena();
  PeerArena(const PeerArena&) = delete;
  PeerArena& operator=(const PeerArena&) = delete;

  const ProcessId& owner() const { return owner_; }
  bool is_self() const { return mapped_size_ == 0; }
  /// False once the owner process has died (no system call).
  bool owner_alive() const;
  template <typename T>
  T* at(uint64_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }
  /// A local duplicate of the owner's fd `remote_fd` (e.g. an eventfd to signal), or -1.
  int import_fd(int remote_fd);

 private:
  ProcessId owner_;
  char* base_;
  size_t mapped_size_;
  int pidfd_ = -1;
  std::mutex mutex_;
  std::map<int, int> imported_;  // owner's fd -> our duplicate
};

/// Maps the arena of the process that owns a registry entry; nullptr if it is gone.
std::shared_ptr<PeerArena> map_peer_arena(const ProcessId& owner, int arena_fd);

}  // namespace softrdma

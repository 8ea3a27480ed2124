#include "common/object_pool.hpp"

#include <pthread.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>

namespace softrdma {
namespace {

// Each object is preceded by a header naming its size class (0: it came from the heap), so
// that release needs no size (the nothrow delete a failed constructor calls has none).
constexpr std::size_t kHeader = kPoolAlign;
constexpr std::size_t kChunkBytes = 64 * 1024;
constexpr std::size_t kClasses = (kPooledMost + kHeader) / kPoolAlign + 1;
static_assert(kPooledMost + kHeader <= kChunkBytes, "a chunk holds the largest object");

struct Header {
  uint32_t size_class;
};
static_assert(sizeof(Header) <= kHeader);

struct FreeSlot {
  FreeSlot* next;
};

struct Pool {
  std::mutex mutex;
  FreeSlot* free[kClasses] = {};  // per class, slots given back (their headers kept)
  char* cursor = nullptr;         // the unused rest of the newest chunk
  char* end = nullptr;
};

// Initialised before anything runs, without a guard: a function-local static's guard, taken
// by one thread while another forks, would leave the child waiting for ever.
constinit Pool g_pool;

// A fork() in another thread while one holds the lock would leave the child's pool locked
// for ever: the lock is held across fork(), as malloc holds its own. Registered when the
// library loads, before the program's threads can use the pool.
[[gnu::constructor]] void hold_lock_across_fork() {
  pthread_atfork([] { g_pool.mutex.lock(); }, [] { g_pool.mutex.unlock(); },
                 [] { g_pool.mutex.unlock(); });
}

void* from_heap(std::size_t bytes) {
  auto* h = static_cast<char*>(std::malloc(bytes + kHeader));
  if (!h) return nullptr;
  reinterpret_cast<Header*>(h)->size_class = 0;
  return h + kHeader;
}

// A new slot of `slot_bytes` from the newest chunk, mapping (and populating) another when
// it is full. Caller holds the lock.
char* carve(std::size_t slot_bytes) {
  if (static_cast<std::size_t>(g_pool.end - g_pool.cursor) < slot_bytes) {
    void* chunk = mmap(nullptr, kChunkBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (chunk == MAP_FAILED) return nullptr;
    g_pool.cursor = static_cast<char*>(chunk);
    g_pool.end = g_pool.cursor + kChunkBytes;
  }
  char* slot = g_pool.cursor;
  g_pool.cursor += slot_bytes;
  return slot;
}

}  // namespace

void* pool_allocate(std::size_t bytes) noexcept {
  if (kPoolsUseHeap || bytes > kPooledMost) return from_heap(bytes);
  const std::size_t size_class = (bytes + kHeader + kPoolAlign - 1) / kPoolAlign;
  std::lock_guard lock(g_pool.mutex);
  if (FreeSlot* reused = g_pool.free[size_class]) {
    g_pool.free[size_class] = reused->next;
    return reused;
  }
  char* slot = carve(size_class * kPoolAlign);
  if (!slot) return nullptr;
  reinterpret_cast<Header*>(slot)->size_class = static_cast<uint32_t>(size_class);
  return slot + kHeader;
}

void pool_release(void* object) noexcept {
  if (!object) return;
  char* slot = static_cast<char*>(object) - kHeader;
  const uint32_t size_class = reinterpret_cast<Header*>(slot)->size_class;
  if (size_class == 0) return std::free(slot);
  std::lock_guard lock(g_pool.mutex);
  auto* freed = static_cast<FreeSlot*>(object);
  freed->next = g_pool.free[size_class];
  g_pool.free[size_class] = freed;
}

}  // namespace softrdma

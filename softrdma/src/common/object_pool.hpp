// Memory for the objects a connection sets up (QPs, CQs, completion channels, CM ids).
// From the heap, each of them lands on pages the heap has just grown into, and the first
// touch of each such page is a fault: about 12 us in a virtual machine like this project's,
// against 1.3 us per page populated in bulk. An RDMA CM connection took 2.3 of them. The
// pool carves these objects out of 64 KiB chunks populated in one call, and reuses what is
// freed, per size.
#pragma once

#include <cstddef>
#include <new>

namespace softrdma {

/// The largest object the pool serves; larger ones go to the heap.
inline constexpr std::size_t kPooledMost = 4096;
/// Every object the pool returns is aligned to this.
inline constexpr std::size_t kPoolAlign = 16;
/// Pools hand out heap memory instead: the sanitizers then see every object's bounds and
/// lifetime (TSan would carry the synchronisation state of a freed object over to the next
/// one at its address).
inline constexpr bool kPoolsUseHeap =
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    true;
#else
    false;
#endif

/// `bytes` of memory aligned to kPoolAlign, or null when the system has none.
void* pool_allocate(std::size_t bytes) noexcept;
/// Returns what pool_allocate gave (null is ignored).
void pool_release(void* p) noexcept;

/// Base of a class whose objects come from the pool: `new T` and `delete` go there.
template <class T>
struct Pooled {
  static void* operator new(std::size_t bytes) {
    static_assert(alignof(T) <= kPoolAlign, "the pool aligns to kPoolAlign only");
    if (void* p = pool_allocate(bytes)) return p;
    throw std::bad_alloc();
  }
  static void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
    static_assert(alignof(T) <= kPoolAlign, "the pool aligns to kPoolAlign only");
    return pool_allocate(bytes);
  }
  static void operator delete(void* p) noexcept { pool_release(p); }
  static void operator delete(void* p, const std::nothrow_t&) noexcept { pool_release(p); }
};

}  // namespace softrdma

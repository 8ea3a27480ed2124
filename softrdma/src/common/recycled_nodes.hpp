// An allocator for the nodes of lists that take and give back one node per entry at a high
// rate: a send queue's requests to other hosts take one as each is sent and give it back as
// it completes, often in another thread (the poster's, the poller's). Freed nodes wait in a
// short list per thread and type and are taken again without going to the heap, which cost
// a cross-host request about 200 instructions (callgrind). Under the sanitizers it is the
// heap's allocator, so that they see every node's lifetime.
#pragma once

#include <cstddef>
#include <memory>

#include "common/object_pool.hpp"

namespace softrdma {

template <class T>
class RecycledNodes {
 public:
  using value_type = T;

  RecycledNodes() noexcept = default;
  template <class U>
  RecycledNodes(const RecycledNodes<U>&) noexcept {}  // NOLINT: rebinding, as std::allocator

  T* allocate(std::size_t n) {
    if (n == 1 && !kPoolsUseHeap)
      if (Free* f = free_list().take()) return reinterpret_cast<T*>(f);
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n == 1 && !kPoolsUseHeap && free_list().give(p)) return;
    std::allocator<T>().deallocate(p, n);
  }
  friend bool operator==(const RecycledNodes&, const RecycledNodes&) noexcept { return true; }

 private:
  struct Free {
    Free* next;
  };
  static_assert(sizeof(T) >= sizeof(Free) && alignof(T) >= alignof(Free),
                "a freed node holds the link to the next");

  struct FreeList {
    // Enough for a deep send queue's worth; beyond it nodes go back to the heap.
    static constexpr std::size_t kMost = 256;
    Free* head = nullptr;
    std::size_t count = 0;

    Free* take() noexcept {
      Free* f = head;
      if (f) {
        head = f->next;
        --count;
      }
      return f;
    }
    bool give(T* p) noexcept {
      if (count == kMost) return false;
      auto* f = reinterpret_cast<Free*>(p);
      f->next = head;
      head = f;
      ++count;
      return true;
    }
    ~FreeList() {
      while (Free* f = take()) std::allocator<T>().deallocate(reinterpret_cast<T*>(f), 1);
    }
  };

  // Initial-exec: a thread_local of a shared library otherwise costs a __tls_get_addr call.
  static FreeList& free_list() noexcept {
    [[gnu::tls_model("initial-exec")]] static thread_local FreeList list;
    return list;
  }
};

}  // namespace softrdma

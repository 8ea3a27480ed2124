// How links publish frames and then look whether the peer sleeps (the Dekker pattern of the
// ring transports): a release store per ring, then one sequentially consistent fence for the
// whole flush round, then the looks. ThreadSanitizer does not model fences, so under it the
// stores themselves are sequentially consistent and the fence is left out.
#pragma once

#include <atomic>

namespace rdmakit::rpc::detail {

#if defined(__SANITIZE_THREAD__)
inline constexpr std::memory_order kPublishOrder = std::memory_order_seq_cst;
inline void publish_fence() noexcept {}
#else
inline constexpr std::memory_order kPublishOrder = std::memory_order_release;
inline void publish_fence() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
#endif

}  // namespace rdmakit::rpc::detail

// How bytes land in a target: a NIC writes a message in address order, each byte once, so
// an application may poll the last byte (or last word) of a buffer and, once it changes,
// trust the rest of the message and reuse the buffer (perftest's write_lat and many RDMA
// designs do). memcpy gives neither promise: glibc copies 8 bytes as two overlapping
// 8-byte moves, storing the last word twice, so a poller that saw it change and wrote its
// own answer there could have that answer overwritten by the second store.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace softrdma {

/// The bytes at the end of a copy that copy_tail_last stores last, in one instruction.
constexpr size_t kOrderedTail = sizeof(uint64_t);

/// Copies one `Word` from `s` to `d` (either unaligned) with a single load and a single
/// store, whatever the optimisation level: a memcpy call for it could store twice.
template <class Word>
inline void copy_word_once(unsigned char* d, const unsigned char* s) {
  struct [[gnu::packed, gnu::may_alias]] Unaligned {
    Word value;
  };
  static_assert(alignof(Unaligned) == 1 && sizeof(Unaligned) == sizeof(Word));
  reinterpret_cast<Unaligned*>(d)->value = reinterpret_cast<const Unaligned*>(s)->value;
}

/// Every store before this call is seen before any store after it (even a fast-string
/// copy's): x86 keeps stores in order, so only the compiler must not move them; weakly
/// ordered CPUs need the fence. (TSan refuses atomic_thread_fence, and x86 needs none.)
inline void stores_before_here() {
#if defined(__x86_64__) || defined(__i386__)
  std::atomic_signal_fence(std::memory_order_release);
#else
  std::atomic_thread_fence(std::memory_order_release);
#endif
}

/// Copies `n` bytes (not overlapping) so that the last kOrderedTail bytes are stored once,
/// after every other byte; shorter copies store ascending pieces, none twice.
[[gnu::always_inline]] inline void copy_tail_last(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (n >= kOrderedTail) {
    const size_t head = n - kOrderedTail;
    if (head) std::memcpy(d, s, head);
    stores_before_here();
    copy_word_once<uint64_t>(d + head, s + head);
    return;
  }
  size_t at = 0;
  if (n & 4) {
    copy_word_once<uint32_t>(d, s);
    at = 4;
  }
  if (n & 2) {
    copy_word_once<uint16_t>(d + at, s + at);
    at += 2;
  }
  if (n & 1) d[at] = s[at];
}

/// As copy_tail_last, for ranges that may overlap (a QP connected to itself copying a region
/// onto itself): those are moved, with no promise about order.
[[gnu::always_inline]] inline void move_tail_last(void* dst, const void* src, size_t n) {
  const auto* d = static_cast<const unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (d < s + n && s < d + n)
    std::memmove(dst, src, n);
  else
    copy_tail_last(dst, src, n);
}

/// Splits the last kOrderedTail bytes of `in` off into an entry of their own, so a copy
/// that goes through the kernel (process_vm_writev copies entry by entry, in order) also
/// stores them last. `out` has room for count + 1 entries; returns the entries used.
inline int split_ordered_tail(const iovec* in, int count, iovec* out) {
  std::copy(in, in + count, out);
  if (count == 0 || out[count - 1].iov_len <= kOrderedTail) return count;
  iovec& last = out[count - 1];
  last.iov_len -= kOrderedTail;
  out[count] = {static_cast<char*>(last.iov_base) + last.iov_len, kOrderedTail};
  return count + 1;
}

}  // namespace softrdma

// Lists of iovecs as the copies and the sockets consume them: their length, and moving a
// list's front past the bytes a call took (a recvmsg or process_vm_* may stop early).
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <cstddef>

namespace softrdma {

/// The bytes the iovecs describe.
inline size_t iov_bytes(const iovec* iov, int count) {
  size_t n = 0;
  for (int i = 0; i < count; ++i) n += iov[i].iov_len;
  return n;
}

/// Moves the front of the list [iov, iov + count) past `n` bytes (at most what it holds):
/// entries it empties leave the list, the first left begins after what was taken.
inline void drop_front(iovec*& iov, int& count, size_t n) {
  while (count > 0 && (n > 0 || iov->iov_len == 0)) {
    const size_t step = std::min(n, iov->iov_len);
    iov->iov_base = static_cast<char*>(iov->iov_base) + step;
    iov->iov_len -= step;
    n -= step;
    if (iov->iov_len == 0) ++iov, --count;
  }
}

}  // namespace softrdma

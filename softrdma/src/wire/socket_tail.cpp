#include "wire/socket_tail.hpp"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "engine/memory_access.hpp"

namespace softrdma::wire {

size_t bytes_waiting(int fd) {
  int n = 0;
  if (ioctl(fd, SIOCINQ, &n) != 0 || n < 0) return 0;
  return static_cast<size_t>(n);
}

bool drop_bytes(int fd, size_t n) {
  // MSG_TRUNC: TCP discards the bytes without copying them anywhere, but the sanitizers'
  // recv takes the buffer as written: give them one of the length asked.
  char dropped[4096];
  while (n > 0) {
    const ssize_t r = recv(fd, dropped, std::min(n, sizeof dropped), MSG_TRUNC | MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;  // they were there: the connection failed
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool SocketTail::read(const iovec* dst, int count) {
  iovec left[kMaxSge + 3];
  if (count + 1 > static_cast<int>(std::size(left))) return false;
  std::copy(dst, dst + count, left);
  size_t asked = 0;
  for (int i = 0; i < count; ++i) asked += dst[i].iov_len;
  if (asked > remaining_) return false;
  // Only the read that ends the tail may go beyond it.
  const bool last = asked == remaining_ && room_ > 0;
  if (last) left[count] = {after_, room_};
  msghdr msg{};
  msg.msg_iov = left;
  msg.msg_iovlen = static_cast<size_t>(count + (last ? 1 : 0));
  while (asked > 0) {
    const ssize_t r = recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    // The bytes were waiting (bytes_waiting): none of them may be missing now.
    if (r <= 0) return false;
    size_t got = static_cast<size_t>(r);
    const size_t mine = std::min(got, asked);
    asked -= mine;
    remaining_ -= mine;
    after_read_ += got - mine;
    while (got > 0) {
      const size_t step = std::min(got, msg.msg_iov->iov_len);
      msg.msg_iov->iov_base = static_cast<char*>(msg.msg_iov->iov_base) + step;
      msg.msg_iov->iov_len -= step;
      got -= step;
      if (msg.msg_iov->iov_len == 0) ++msg.msg_iov, --msg.msg_iovlen;
    }
  }
  return true;
}

bool SocketTail::drop_rest() {
  const size_t n = remaining_;
  remaining_ = 0;
  return drop_bytes(fd_, n);
}

}  // namespace softrdma::wire

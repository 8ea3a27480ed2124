#include "wire/socket_tail.hpp"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "engine/iovec_list.hpp"
#include "engine/memory_access.hpp"
#include "wire/socket_io.hpp"

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
    const ssize_t r = recv_now(fd, dropped, std::min(n, sizeof dropped), MSG_TRUNC | MSG_DONTWAIT);
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
  size_t asked = iov_bytes(dst, count);
  if (asked > remaining_) return false;
  // Only the read that ends the tail may go beyond it.
  const bool last = asked == remaining_ && room_ > 0;
  if (last) left[count] = {after_, room_};
  iovec* unfilled = left;
  int entries = count + (last ? 1 : 0);
  while (asked > 0) {
    msghdr msg{};
    msg.msg_iov = unfilled;
    msg.msg_iovlen = static_cast<size_t>(entries);
    const ssize_t r = recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    // The bytes were waiting (bytes_waiting): none of them may be missing now.
    if (r <= 0) return false;
    const size_t got = static_cast<size_t>(r);
    const size_t mine = std::min(got, asked);
    asked -= mine;
    remaining_ -= mine;
    after_read_ += got - mine;
    drop_front(unfilled, entries, got);
  }
  return true;
}

bool SocketTail::drop_rest() {
  const size_t n = remaining_;
  remaining_ = 0;
  return drop_bytes(fd_, n);
}

}  // namespace softrdma::wire

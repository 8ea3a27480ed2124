#include "wire/socket_io.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>

namespace softrdma::wire {

ssize_t write_now(int fd, const iovec* iov, int count) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(count);
  for (;;) {
    const ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) return w;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno != EINTR) return -1;
  }
}

void tune_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

void tune_data_socket(int fd) {
  tune_socket(fd);
  // Autotuning starts a send buffer at 16 KiB (tcp_wmem) and grows it with the window: the
  // first thousands of 64 KiB requests were written in pieces, the rest queued for the
  // writer thread. A fixed size (capped by net.core.wmem_max, doubled by the kernel) takes
  // whole messages at once; receive buffers keep autotuning, which goes further.
  constexpr int kSendBuffer = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSendBuffer, sizeof kSendBuffer);
}

}  // namespace softrdma::wire

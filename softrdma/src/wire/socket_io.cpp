#include "wire/socket_io.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cerrno>
#include <cstdint>

namespace softrdma::wire {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kPlainSystemCalls = false;
#else
constexpr bool kPlainSystemCalls = true;
#endif

}  // namespace

ssize_t recv_now(int fd, void* buffer, size_t length, int flags) {
  return kPlainSystemCalls ? syscall(SYS_recvfrom, fd, buffer, length, flags, nullptr, nullptr)
                           : recv(fd, buffer, length, flags);
}

int ready_now(int epfd, epoll_event* events, int most) {
  // epoll_pwait with no signal mask is epoll_wait, and every architecture has it.
  return kPlainSystemCalls
             ? static_cast<int>(syscall(SYS_epoll_pwait, epfd, events, most, 0, nullptr, 0))
             : epoll_wait(epfd, events, most, 0);
}

void notify_eventfd(int fd) {
  const uint64_t one = 1;
  while ((kPlainSystemCalls ? syscall(SYS_write, fd, &one, sizeof one)
                            : write(fd, &one, sizeof one)) < 0 &&
         errno == EINTR) {
  }
}

ssize_t write_now(int fd, const iovec* iov, int count) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(count);
  for (;;) {
    constexpr int kFlags = MSG_NOSIGNAL | MSG_DONTWAIT;
    const ssize_t w =
        kPlainSystemCalls ? syscall(SYS_sendmsg, fd, &msg, kFlags) : sendmsg(fd, &msg, kFlags);
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

// The non-blocking acceptor of connections whose client speaks first (see hello_acceptor.hpp).
#include "tcp/hello_acceptor.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tcp/sockets.hpp"

namespace rdmakit::rpc::detail {
namespace {

// Connections accepted whose hello has not arrived; a flood of silent ones drops the oldest.
constexpr size_t kMostWaiting = 64;
// Connections taken from the backlog per call, so that one call stays short.
constexpr int kAcceptsPerCall = 16;

bool watch(int epoll_fd, int fd) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event) == 0;
}

}  // namespace

std::unique_ptr<HelloAcceptor> HelloAcceptor::open(int listen_fd, size_t hello_bytes,
                                                   std::vector<std::byte> greeting,
                                                   std::chrono::milliseconds timeout,
                                                   std::error_code& error) {
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0 || !watch(epoll_fd, listen_fd)) {
    error = system_error(errno);
    if (epoll_fd >= 0) close(epoll_fd);
    close(listen_fd);
    return nullptr;
  }
  return std::unique_ptr<HelloAcceptor>(
      new HelloAcceptor(listen_fd, epoll_fd, hello_bytes, std::move(greeting), timeout));
}

HelloAcceptor::HelloAcceptor(int listen_fd, int epoll_fd, size_t hello_bytes,
                             std::vector<std::byte> greeting, std::chrono::milliseconds timeout)
    : listen_fd_(listen_fd),
      epoll_fd_(epoll_fd),
      hello_bytes_(hello_bytes),
      greeting_(std::move(greeting)),
      timeout_(timeout) {}

HelloAcceptor::~HelloAcceptor() {
  for (const Waiting& c : waiting_) close(c.fd);
  close(epoll_fd_);
  close(listen_fd_);
}

HelloAcceptor::Progress HelloAcceptor::read_hello(Waiting& c) {
  while (c.received < c.hello.size()) {
    const ssize_t n = ::recv(c.fd, c.hello.data() + c.received, c.hello.size() - c.received, 0);
    if (n > 0) {
      c.received += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? Progress::waiting
                                                                : Progress::broken;
    }
  }
  return Progress::arrived;
}

void HelloAcceptor::forget(size_t index) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, waiting_[index].fd, nullptr);
  waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(index));
}

int HelloAcceptor::hand_over(const Waiting& c, std::span<std::byte> hello) {
  std::memcpy(hello.data(), c.hello.data(), std::min(hello.size(), c.hello.size()));
  return c.fd;
}

int HelloAcceptor::next(std::span<std::byte> hello) {
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < waiting_.size();) {
    Waiting& c = waiting_[i];
    const Progress progress = read_hello(c);
    if (progress == Progress::waiting && now < c.deadline) {
      ++i;
      continue;
    }
    const Waiting done = std::move(c);
    forget(i);
    if (progress == Progress::arrived) return hand_over(done, hello);
    close(done.fd);  // it hung up, or kept silent past the timeout
  }
  for (int i = 0; i < kAcceptsPerCall; ++i) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == ECONNABORTED || errno == EINTR) continue;
      return -1;  // none waits (or out of descriptors: the backlog keeps them)
    }
    set_no_delay(fd);
    // A new socket's send buffer is empty: the greeting goes in whole or the peer is gone.
    if (!greeting_.empty() && ::send(fd, greeting_.data(), greeting_.size(), MSG_NOSIGNAL) !=
                                  static_cast<ssize_t>(greeting_.size())) {
      close(fd);
      continue;
    }
    Waiting c{fd, now + timeout_, std::vector<std::byte>(hello_bytes_)};
    const Progress progress = read_hello(c);
    if (progress == Progress::arrived) return hand_over(c, hello);
    if (progress == Progress::broken || !watch(epoll_fd_, fd)) {
      close(fd);
      continue;
    }
    if (waiting_.size() == kMostWaiting) {
      close(waiting_.front().fd);
      forget(0);
    }
    waiting_.push_back(std::move(c));
  }
  return -1;
}

}  // namespace rdmakit::rpc::detail

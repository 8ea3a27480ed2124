// A socket as a byte stream (see socket_stream.hpp).
#include "tcp/socket_stream.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "rdmakit/rpc/status.hpp"

namespace rdmakit::rpc::detail {
namespace {

bool transient(int error) noexcept {
  return error == EAGAIN || error == EWOULDBLOCK || error == EINTR;
}

}  // namespace

std::unique_ptr<SocketStream> SocketStream::open(int fd, std::error_code& error) {
  const int wake_fd = epoll_create1(EPOLL_CLOEXEC);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  if (wake_fd < 0 || epoll_ctl(wake_fd, EPOLL_CTL_ADD, fd, &event) != 0) {
    error = std::error_code(errno, std::system_category());
    if (wake_fd >= 0) close(wake_fd);
    close(fd);
    return nullptr;
  }
  return std::make_unique<SocketStream>(fd, wake_fd);
}

SocketStream::~SocketStream() {
  close(wake_fd_);
  close(fd_);
}

size_t SocketStream::write(std::span<const std::byte> bytes) {
  const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  if (n >= 0) return static_cast<size_t>(n);
  if (!transient(errno)) ended_ = make_error_code(Errc::session_closed);
  return 0;
}

size_t SocketStream::read(std::span<std::byte> space) {
  const ssize_t n = ::recv(fd_, space.data(), space.size(), 0);
  if (n > 0) return static_cast<size_t>(n);
  if (n == 0 || !transient(errno)) ended_ = make_error_code(Errc::session_closed);
  return 0;
}

void SocketStream::shut_down() {
  shutdown(fd_, SHUT_RDWR);
}

void SocketStream::set_sleeping(bool sleeping, bool output_waiting) {
  const bool want_room = sleeping && output_waiting;
  if (want_room == waking_for_room_) return;
  epoll_event event{};
  event.events = want_room ? EPOLLIN | EPOLLOUT : EPOLLIN;
  event.data.fd = fd_;
  epoll_ctl(wake_fd_, EPOLL_CTL_MOD, fd_, &event);
  waking_for_room_ = want_room;
}

}  // namespace rdmakit::rpc::detail

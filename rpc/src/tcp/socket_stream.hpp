// tcp://'s byte stream: a connected non-blocking socket. Its wake-up descriptor is an epoll
// set of the socket: readable, or writable while output waits (only this side can send it).
#pragma once

#include <memory>
#include <system_error>

#include "stream/byte_stream.hpp"

namespace rdmakit::rpc::detail {

class SocketStream final : public ByteStream {
 public:
  /// Takes `fd` (closed on failure too); nullptr with `error` set if no epoll set is made.
  static std::unique_ptr<SocketStream> open(int fd, std::error_code& error);
  SocketStream(int fd, int wake_fd) noexcept : fd_(fd), wake_fd_(wake_fd) {}
  ~SocketStream() override;
  SocketStream(const SocketStream&) = delete;
  SocketStream& operator=(const SocketStream&) = delete;

  size_t write(std::span<const std::byte> bytes) override;
  size_t read(std::span<std::byte> space) override;
  std::error_code ended() const override { return ended_; }
  void shut_down() override;
  int wait_fd() const override { return wake_fd_; }
  void set_sleeping(bool sleeping, bool output_waiting) override;

 private:
  int fd_;
  int wake_fd_;
  bool waking_for_room_ = false;
  std::error_code ended_;  // EOF, reset or a failed send
};

}  // namespace rdmakit::rpc::detail

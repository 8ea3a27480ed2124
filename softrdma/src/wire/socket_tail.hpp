// A large request's payload read from its socket straight into its destination: the
// header is read first, and once the whole payload waits in the socket the responder runs
// the request with the payload as a PayloadTail (engine/payload_tail.hpp).
#pragma once

#include <cstddef>

#include "engine/payload_tail.hpp"

namespace softrdma::wire {

/// Bytes the socket holds ready to read (its receive queue).
size_t bytes_waiting(int fd);

/// Reads and drops `n` bytes that are waiting in the socket. False if it failed.
bool drop_bytes(int fd, size_t n);

/// The next `bytes` of a connected, non-blocking socket in which they all wait already, so
/// that no read of them waits. The read that completes them also takes up to `room` bytes
/// that follow, if they are there, into `after` (the next request's header: one system call
/// instead of two per request).
class SocketTail final : public PayloadTail {
 public:
  SocketTail(int fd, size_t bytes, char* after = nullptr, size_t room = 0)
      : fd_(fd), remaining_(bytes), after_(after), room_(room) {}
  size_t remaining() const override { return remaining_; }
  bool read(const iovec* dst, int count) override;
  /// Drops what the responder did not read (a request it did not carry out). False if that
  /// failed.
  bool drop_rest();
  /// Bytes read into `after`.
  size_t after_read() const { return after_read_; }

 private:
  int fd_;
  size_t remaining_;
  char* after_;
  size_t room_;
  size_t after_read_ = 0;
};

}  // namespace softrdma::wire

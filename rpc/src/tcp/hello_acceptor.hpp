// Accepting TCP connections from a server's poll without ever blocking it (tcp://, and
// ud://, whose sessions are set up over TCP). A connection's client speaks first, with a
// hello of a fixed size; one whose hello has not fully arrived waits in a short list that
// later calls complete (a flood of silent ones drops the oldest, one silent past the
// timeout is closed). The descriptor to wait on is an epoll set of the listening socket and
// those connections, so that a sleeping server wakes for either.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <system_error>
#include <vector>

namespace rdmakit::rpc::detail {

class HelloAcceptor {
 public:
  /// Takes `listen_fd` (closed on failure too). `greeting`: bytes sent to every connection
  /// as soon as it is accepted (may be empty). nullptr with `error` set on failure.
  static std::unique_ptr<HelloAcceptor> open(int listen_fd, size_t hello_bytes,
                                             std::vector<std::byte> greeting,
                                             std::chrono::milliseconds timeout,
                                             std::error_code& error);
  ~HelloAcceptor();
  HelloAcceptor(const HelloAcceptor&) = delete;
  HelloAcceptor& operator=(const HelloAcceptor&) = delete;

  /// A connection whose client's hello has arrived (copied into `hello`, which holds the
  /// hello's size): its socket, non-blocking and now the caller's; -1 when none has. Never
  /// blocks, and takes a bounded number of connections from the backlog per call.
  int next(std::span<std::byte> hello);
  /// Readable when a connection waits or a waiting one's client sent something.
  int wait_fd() const noexcept { return epoll_fd_; }

 private:
  struct Waiting {
    int fd;
    std::chrono::steady_clock::time_point deadline;
    std::vector<std::byte> hello;
    size_t received = 0;
  };
  enum class Progress { waiting, arrived, broken };

  HelloAcceptor(int listen_fd, int epoll_fd, size_t hello_bytes, std::vector<std::byte> greeting,
                std::chrono::milliseconds timeout);
  static Progress read_hello(Waiting& c);
  void forget(size_t index);
  /// The arrived connection `c`'s socket, its hello copied out (c is forgotten).
  static int hand_over(const Waiting& c, std::span<std::byte> hello);

  int listen_fd_;
  int epoll_fd_;
  size_t hello_bytes_;
  std::vector<std::byte> greeting_;
  std::chrono::milliseconds timeout_;
  std::vector<Waiting> waiting_;  // oldest first
};

}  // namespace rdmakit::rpc::detail

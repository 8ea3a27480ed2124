// tcp://HOST:PORT: one TCP connection per session, carried by a StreamLink over a SocketStream
// (stream/stream_link.hpp). Both sides open with a 24-byte hello (magic, version, window, message
// size limit). Connecting needs no answer from the server, which may be polled by the same thread
// only afterwards: the client sends its hello and keeps its own limits; its link checks the
// server's hello when it arrives. The server takes the client's limits if they are within its own
// and drops the connection otherwise (as shm does). Connecting blocks up to
// Options::connect_timeout for the TCP connection only. The server never blocks: a
// connection whose hello has not fully arrived waits in a short list that later accept()
// calls complete; the listener's descriptor is an epoll set of the listening socket and
// those connections, so that a sleeping server wakes for either.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>

#include "core/engine.hpp"
#include "core/transports.hpp"
#include "stream/stream_link.hpp"
#include "tcp/socket_stream.hpp"
#include "tcp/sockets.hpp"
#include "tcp/tcp_hello.hpp"

namespace rdmakit::rpc::detail {
namespace {

// Connections accepted whose hello has not arrived; a flood of silent ones drops the oldest.
constexpr size_t kMaxHalfOpen = 64;
// Connections taken from the backlog per accept() call, so that one call stays short.
constexpr int kAcceptsPerCall = 16;

TcpHello own_hello(const Options& options) {
  return {kTcpHelloMagic, kTcpHelloVersion, options.window, options.max_message_bytes, 0};
}

/// The client's limits, which the server takes when they are within its own; nothing for a
/// client of another protocol or one asking for more.
std::optional<LinkLimits> admit(const TcpHello& server, const TcpHello& client) {
  if (!compatible(client) || client.window == 0 || client.window > server.window ||
      client.max_message_bytes > server.max_message_bytes)
    return std::nullopt;
  return LinkLimits{client.window, client.max_message_bytes};
}

/// The session of `fd`, whose own hello is sent; `awaits_hello`: the peer's is not read yet.
/// nullptr (and `fd` closed) when out of descriptors.
std::unique_ptr<Link> open_link(int fd, LinkLimits limits, bool awaits_hello) {
  std::error_code error;
  std::unique_ptr<SocketStream> stream = SocketStream::open(fd, error);
  if (!stream) return nullptr;
  const StreamLink::AwaitedHello hello{awaits_hello ? sizeof(TcpHello) : 0, compatible_hello};
  return std::make_unique<StreamLink>(std::move(stream), limits, hello);
}

class TcpListener final : public Listener {
 public:
  TcpListener(int listen_fd, int epoll_fd, std::string url, const Options& options)
      : listen_fd_(listen_fd),
        epoll_fd_(epoll_fd),
        url_(std::move(url)),
        own_(own_hello(options)),
        hello_timeout_(options.connect_timeout) {}
  ~TcpListener() override {
    for (const HalfOpen& c : half_open_) close(c.fd);
    close(epoll_fd_);
    close(listen_fd_);
  }
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  std::unique_ptr<Link> accept() override;
  int wait_fd() const override { return epoll_fd_; }
  const std::string& url() const override { return url_; }

 private:
  struct HalfOpen {
    int fd;
    Clock::time_point deadline;
    std::array<std::byte, sizeof(TcpHello)> hello{};
    size_t received = 0;
  };
  enum class Progress { waiting, arrived, broken };

  static Progress read_hello(HalfOpen& c);
  /// The session of a connection whose hello arrived; nullptr (and the socket closed) when
  /// the client is not admitted.
  std::unique_ptr<Link> open(const HalfOpen& c) const;
  void forget(size_t index);

  int listen_fd_;
  int epoll_fd_;
  std::string url_;
  TcpHello own_;
  std::chrono::milliseconds hello_timeout_;
  std::vector<HalfOpen> half_open_;  // oldest first
};

TcpListener::Progress TcpListener::read_hello(HalfOpen& c) {
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

std::unique_ptr<Link> TcpListener::open(const HalfOpen& c) const {
  TcpHello peer;
  std::memcpy(&peer, c.hello.data(), sizeof peer);
  const std::optional<LinkLimits> limits = admit(own_, peer);
  if (!limits) {
    close(c.fd);
    return nullptr;
  }
  return open_link(c.fd, *limits, false);
}

void TcpListener::forget(size_t index) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, half_open_[index].fd, nullptr);
  half_open_.erase(half_open_.begin() + static_cast<std::ptrdiff_t>(index));
}

std::unique_ptr<Link> TcpListener::accept() {
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < half_open_.size();) {
    HalfOpen& c = half_open_[i];
    const Progress progress = read_hello(c);
    if (progress == Progress::waiting && now < c.deadline) {
      ++i;
      continue;
    }
    const HalfOpen done = c;
    forget(i);
    if (progress != Progress::arrived) {
      close(done.fd);  // it hung up, or kept silent past the timeout
    } else if (std::unique_ptr<Link> link = open(done)) {
      return link;
    }
  }
  for (int i = 0; i < kAcceptsPerCall; ++i) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == ECONNABORTED || errno == EINTR) continue;
      return nullptr;  // none waits (or out of descriptors: the backlog keeps them)
    }
    set_no_delay(fd);
    // A new socket's send buffer is empty: the hello goes in whole or the peer is gone.
    if (::send(fd, &own_, sizeof own_, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof own_)) {
      close(fd);
      continue;
    }
    HalfOpen c{fd, now + hello_timeout_};
    const Progress progress = read_hello(c);
    if (progress == Progress::arrived) {
      if (std::unique_ptr<Link> link = open(c)) return link;
      continue;
    }
    if (progress == Progress::broken) {
      close(fd);
      continue;
    }
    if (half_open_.size() == kMaxHalfOpen) {
      close(half_open_.front().fd);
      forget(0);
    }
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
    half_open_.push_back(c);
  }
  return nullptr;
}

}  // namespace

std::unique_ptr<Listener> listen_tcp(const std::string& host_port, Engine& engine,
                                     std::error_code& error) {
  HostPort where;
  const Addresses addresses = resolve(host_port, true, where, error);
  if (!addresses) return nullptr;
  const int fd = listen_on(addresses, error);
  if (fd < 0) return nullptr;
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  if (epoll_fd < 0 || epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event) != 0) {
    error = system_error(errno);
    if (epoll_fd >= 0) close(epoll_fd);
    close(fd);
    return nullptr;
  }
  error.clear();
  return std::make_unique<TcpListener>(
      fd, epoll_fd, "tcp://" + where.written_host + ":" + std::to_string(bound_port(fd)),
      engine.options());
}

std::unique_ptr<Link> connect_tcp(const std::string& host_port, Engine& engine,
                                  std::error_code& error) {
  HostPort where;
  const Addresses addresses = resolve(host_port, false, where, error);
  if (!addresses) return nullptr;
  const Clock::time_point deadline = Clock::now() + engine.options().connect_timeout;
  const TcpHello own = own_hello(engine.options());
  // A name may have several addresses ("localhost": ::1 and 127.0.0.1): the first that
  // accepts.
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    const int fd = connect_socket(*a, deadline, error);
    if (fd < 0) {
      if (error == std::errc::timed_out) return nullptr;
      continue;
    }
    if (!send_all(fd, std::as_bytes(std::span(&own, 1)), deadline, error)) {
      close(fd);
      return nullptr;
    }
    std::unique_ptr<Link> link = open_link(fd, LinkLimits{own.window, own.max_message_bytes}, true);
    if (link)
      error.clear();
    else
      error = std::make_error_code(std::errc::too_many_files_open);
    return link;
  }
  return nullptr;
}

}  // namespace rdmakit::rpc::detail

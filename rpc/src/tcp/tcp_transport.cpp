// tcp://HOST:PORT: one TCP connection per session, carried by TcpLink (tcp_link.hpp). Both
// sides open with a 24-byte hello (magic, version, window, message size limit). Connecting
// needs no answer from the server, which may be polled by the same thread only afterwards:
// the client sends its hello and keeps its own limits; its link checks the server's hello
// when it arrives. The server takes the client's limits if they are within its own and
// drops the connection otherwise (as shm does). Connecting blocks up to
// Options::connect_timeout for the TCP connection only. The server never blocks: a
// connection whose hello has not fully arrived waits in a short list that later accept()
// calls complete; the listener's descriptor is an epoll set of the listening socket and
// those connections, so that a sleeping server wakes for either.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>

#include "core/engine.hpp"
#include "core/transports.hpp"
#include "tcp/tcp_link.hpp"

namespace rdmakit::rpc::detail {
namespace {

constexpr int kBacklog = 256;
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

struct HostPort {
  std::string written_host;  // as in the URL: "[::1]"
  std::string host;          // for getaddrinfo: "::1"
  std::string port;
};

/// "HOST:PORT", an IPv6 HOST in brackets; nothing if malformed.
std::optional<HostPort> parse_host_port(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  HostPort parsed{address.substr(0, colon), address.substr(0, colon), address.substr(colon + 1)};
  std::string& host = parsed.host;
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return std::nullopt;
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return std::nullopt;  // an IPv6 address without brackets
  }
  const std::string& port = parsed.port;
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoul(port) > 65535)
    return std::nullopt;
  return parsed;
}

struct FreeAddresses {
  void operator()(addrinfo* addresses) const noexcept { freeaddrinfo(addresses); }
};
using Addresses = std::unique_ptr<addrinfo, FreeAddresses>;

Addresses resolve(const HostPort& where, bool passive, std::error_code& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(where.host.c_str(), where.port.c_str(), &hints, &found);
  if (rc != 0) {
    error = rc == EAI_SYSTEM ? std::error_code(errno, std::system_category())
                             : make_error_code(Errc::bad_url);
    return nullptr;
  }
  return Addresses(found);
}

std::error_code system_error(int code) {
  return code == ECONNREFUSED ? make_error_code(Errc::not_listening)
                              : std::error_code(code, std::system_category());
}

/// Small frames go out at once, not after Nagle's delay.
void set_no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// Waits for `events` on `fd`; false with `error` set once `deadline` passes.
bool wait_for(int fd, short events, Clock::time_point deadline, std::error_code& error) {
  for (;;) {
    const int64_t left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) {
      error = system_error(errno);
      return false;
    }
    if (n == 0 && left <= 0) {
      error = std::make_error_code(std::errc::timed_out);
      return false;
    }
  }
}

/// A connected non-blocking socket to `address`, or -1 with `error` set.
int connect_socket(const addrinfo& address, Clock::time_point deadline, std::error_code& error) {
  const int fd =
      socket(address.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, address.ai_protocol);
  if (fd < 0) {
    error = system_error(errno);
    return -1;
  }
  set_no_delay(fd);
  if (::connect(fd, address.ai_addr, address.ai_addrlen) != 0) {
    int result = errno;
    if (result == EINPROGRESS) {
      result = 0;
      socklen_t size = sizeof result;
      if (!wait_for(fd, POLLOUT, deadline, error)) {
        close(fd);
        return -1;
      }
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &result, &size);
    }
    if (result != 0) {
      error = system_error(result);
      close(fd);
      return -1;
    }
  }
  return fd;
}

bool send_hello(int fd, const TcpHello& hello, Clock::time_point deadline, std::error_code& error) {
  std::array<std::byte, sizeof(TcpHello)> bytes;
  std::memcpy(bytes.data(), &hello, sizeof hello);
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!wait_for(fd, POLLOUT, deadline, error)) return false;
    } else {
      error = errno == EPIPE || errno == ECONNRESET ? make_error_code(Errc::session_closed)
                                                    : system_error(errno);
      return false;
    }
  }
  return true;
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
  std::error_code error;  // out of descriptors: the connection is dropped like a bad one
  return TcpLink::open(c.fd, *limits, false, error);
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

/// A listening non-blocking socket on `address`, or -1 with `error` set.
int listen_socket(const addrinfo& address, std::error_code& error) {
  const int fd =
      socket(address.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, address.ai_protocol);
  if (fd < 0) {
    error = system_error(errno);
    return -1;
  }
  // SO_REUSEPORT: several server threads may listen on one port, the kernel spreads the
  // connections.
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (bind(fd, address.ai_addr, address.ai_addrlen) != 0 || listen(fd, kBacklog) != 0) {
    error = system_error(errno);
    close(fd);
    return -1;
  }
  return fd;
}

uint16_t bound_port(int fd) {
  sockaddr_storage bound{};
  socklen_t size = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size);
  return ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

}  // namespace

std::unique_ptr<Listener> listen_tcp(const std::string& host_port, Engine& engine,
                                     std::error_code& error) {
  const std::optional<HostPort> where = parse_host_port(host_port);
  if (!where) {
    error = make_error_code(Errc::bad_url);
    return nullptr;
  }
  const Addresses addresses = resolve(*where, true, error);
  if (!addresses) return nullptr;
  int fd = -1;
  for (const addrinfo* a = addresses.get(); a != nullptr && fd < 0; a = a->ai_next)
    fd = listen_socket(*a, error);
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
      fd, epoll_fd, "tcp://" + where->written_host + ":" + std::to_string(bound_port(fd)),
      engine.options());
}

std::unique_ptr<Link> connect_tcp(const std::string& host_port, Engine& engine,
                                  std::error_code& error) {
  const std::optional<HostPort> where = parse_host_port(host_port);
  if (!where) {
    error = make_error_code(Errc::bad_url);
    return nullptr;
  }
  const Addresses addresses = resolve(*where, false, error);
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
    if (!send_hello(fd, own, deadline, error)) {
      close(fd);
      return nullptr;
    }
    error.clear();
    return TcpLink::open(fd, LinkLimits{own.window, own.max_message_bytes}, true, error);
  }
  return nullptr;
}

}  // namespace rdmakit::rpc::detail

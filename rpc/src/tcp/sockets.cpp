// TCP socket helpers (see sockets.hpp).
#include "tcp/sockets.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "rdmakit/rpc/status.hpp"

namespace rdmakit::rpc::detail {
namespace {

constexpr int kBacklog = 256;

}  // namespace

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

Addresses resolve(const std::string& host_port, bool passive, HostPort& where,
                  std::error_code& error) {
  std::optional<HostPort> parsed = parse_host_port(host_port);
  if (!parsed) {
    error = make_error_code(Errc::bad_url);
    return nullptr;
  }
  where = std::move(*parsed);
  return resolve(where, passive, error);
}

std::error_code system_error(int code) {
  return code == ECONNREFUSED ? make_error_code(Errc::not_listening)
                              : std::error_code(code, std::system_category());
}

void set_no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

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

int listen_on(const Addresses& addresses, std::error_code& error) {
  int fd = -1;
  for (const addrinfo* a = addresses.get(); a != nullptr && fd < 0; a = a->ai_next)
    fd = listen_socket(*a, error);
  if (fd >= 0) error.clear();
  return fd;
}

uint16_t bound_port(int fd) {
  sockaddr_storage bound{};
  socklen_t size = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size);
  return ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

bool send_all(int fd, std::span<const std::byte> bytes, Clock::time_point deadline,
              std::error_code& error) {
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

bool receive_all(int fd, std::span<std::byte> space, Clock::time_point deadline,
                 std::error_code& error) {
  size_t received = 0;
  while (received < space.size()) {
    const ssize_t n = ::recv(fd, space.data() + received, space.size() - received, 0);
    if (n > 0) {
      received += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(fd, POLLIN, deadline, error)) return false;
    } else {
      error = n == 0 || errno == ECONNRESET ? make_error_code(Errc::session_closed)
                                            : system_error(errno);
      return false;
    }
  }
  return true;
}

}  // namespace rdmakit::rpc::detail

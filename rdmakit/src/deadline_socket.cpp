#include "deadline_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "rdmakit/error.hpp"

namespace rdmakit::detail {
namespace {

// Milliseconds left until `deadline`, at least 0; -1 (forever) for the maximal time point.
int remaining_ms(Deadline deadline) {
  if (deadline == Deadline::max()) return -1;
  // Rounded up, so the wait never ends early; a deadline already reached does not wait at
  // all (a zero wait only looks).
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace

bool wait_for(int fd, short events, Deadline deadline, std::error_code& ec) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0) {
      ec = make_error_code(Errc::timed_out);
      return false;
    }
    if (errno != EINTR) {
      ec = verbs_error(errno);
      return false;
    }
  }
}

int tcp_connect(const std::string& host, uint16_t port, Deadline deadline, std::error_code& ec) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
    ec = verbs_error(EHOSTUNREACH);
    return -1;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ec = verbs_error(errno);
    freeaddrinfo(found);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int rc = ::connect(fd, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (rc != 0 && errno != EINPROGRESS) {
    ec = verbs_error(errno);
    close(fd);
    return -1;
  }
  if (rc != 0) {
    int err = 0;
    socklen_t len = sizeof err;
    if (!wait_for(fd, POLLOUT, deadline, ec) ||
        (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0 &&
         (ec = verbs_error(err)))) {
      close(fd);
      return -1;
    }
  }
  ec.clear();
  return fd;
}

int tcp_listen(const std::string& address, uint16_t port, int backlog) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_verbs_error("socket", errno, "TCP listener");
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  if (inet_pton(AF_INET, address.c_str(), &sin.sin_addr) != 1) {
    close(fd);
    throw Error(verbs_error(EINVAL), "not an IPv4 address: " + address);
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0 || listen(fd, backlog) != 0) {
    const int err = errno;
    close(fd);
    throw_verbs_error("bind/listen", err, address + ":" + std::to_string(port));
  }
  return fd;
}

uint16_t local_port(int fd) {
  sockaddr_in sin{};
  socklen_t len = sizeof sin;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sin), &len);
  return ntohs(sin.sin_port);
}

std::string peer_name(int fd) {
  sockaddr_in sin{};
  socklen_t len = sizeof sin;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&sin), &len) != 0) return "?";
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &sin.sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(sin.sin_port));
}

bool wait_readable(int fd, Deadline deadline, std::error_code& ec) {
  return wait_for(fd, POLLIN, deadline, ec);
}

bool send_all(int fd, const void* data, size_t size, Deadline deadline, std::error_code& ec) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(fd, POLLOUT, deadline, ec)) return false;
    } else {
      ec = n < 0 && errno != EPIPE && errno != ECONNRESET ? verbs_error(errno)
                                                          : make_error_code(Errc::peer_closed);
      return false;
    }
  }
  return true;
}

bool recv_exact(int fd, void* data, size_t size, Deadline deadline, std::error_code& ec) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(fd, POLLIN, deadline, ec)) return false;
    } else {
      ec = n < 0 && errno != ECONNRESET ? verbs_error(errno) : make_error_code(Errc::peer_closed);
      return false;
    }
  }
  return true;
}

}  // namespace rdmakit::detail

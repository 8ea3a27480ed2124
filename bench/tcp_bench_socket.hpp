// TCP plumbing shared by the socket benchmarks (tcp_ping_pong, tcp_two_way): a listener, a
// connection with TCP_NODELAY, and whole-buffer blocking I/O. Any failure ends the program
// with a message naming it.
#pragma once

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tcp_bench {

[[noreturn]] inline void die(const char* what) {
  std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, std::strerror(errno));
  std::exit(1);
}

inline void set_nodelay(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("TCP_NODELAY");
}

inline int listen_on(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 4) != 0)
    die("listen");
  return fd;
}

inline int accept_from(int listener) {
  const int fd = accept(listener, nullptr, nullptr);
  if (fd < 0) die("accept");
  set_nodelay(fd);
  return fd;
}

inline int connect_to(const char* address, uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, address, &a.sin_addr) != 1) die("address");
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  set_nodelay(fd);
  return fd;
}

inline void send_all(int fd, const void* data, size_t n) {
  const char* c = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (w <= 0) die("send");
    c += w;
    n -= static_cast<size_t>(w);
  }
}

inline void recv_all(int fd, void* data, size_t n) {
  char* c = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = recv(fd, c, n, MSG_WAITALL);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) die("recv");
    c += r;
    n -= static_cast<size_t>(r);
  }
}

}  // namespace tcp_bench

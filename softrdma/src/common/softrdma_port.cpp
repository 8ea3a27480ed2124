#include "common/softrdma_port.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstdlib>

namespace softrdma {

uint16_t base_port() {
  static const uint16_t p = [] {
    const char* env = std::getenv("SOFTRDMA_PORT");
    const long v = env ? std::strtol(env, nullptr, 10) : 0;
    return static_cast<uint16_t>(v > 0 && v < 65536 ? v : kDefaultPort);
  }();
  return p;
}

uint16_t port_of_range(uint32_t range) {
  const uint32_t p = base_port() + range;
  return p <= 65535 ? static_cast<uint16_t>(p) : 0;
}

bool port_held_by_another(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  const bool held = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno == EADDRINUSE;
  close(fd);
  return held;
}

}  // namespace softrdma

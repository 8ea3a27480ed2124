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

int bind_shared_port(uint16_t port, int type_flags) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | type_flags, 0);
  if (fd < 0) return -1;
  // No SO_REUSEADDR: a bound socket that had it could be bound again by another user who set
  // it too, and who would then listen before this process does.
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

bool port_held_by_another(uint16_t port) {
  const int fd = bind_shared_port(port, 0);
  if (fd < 0) return errno == EADDRINUSE;
  close(fd);
  return false;
}

}  // namespace softrdma

#include "common/self_connect.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

namespace softrdma {

bool connected_to_itself(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
    return false;
  return local_len == peer_len && std::memcmp(&local, &peer, local_len) == 0;
}

void reset_on_close(int fd) {
  const linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
}

}  // namespace softrdma

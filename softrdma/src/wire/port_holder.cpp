#include "wire/port_holder.hpp"

#include <cstdio>

namespace softrdma::wire {

std::optional<uid_t> listener_owner(uint16_t port) {
  constexpr unsigned kListen = 0x0a;  // TCP_LISTEN, as /proc/net/tcp writes st
  std::FILE* table = std::fopen("/proc/net/tcp", "re");
  if (!table) return std::nullopt;
  std::optional<uid_t> owner;
  char line[512];
  std::fgets(line, sizeof line, table);  // the heading
  while (!owner && std::fgets(line, sizeof line, table)) {
    unsigned local_port = 0, state = 0, uid = 0;
    // sl: local_address:port remote_address:port st tx:rx tr:when retrnsmt uid
    if (std::sscanf(line, " %*u: %*x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %u", &local_port, &state,
                    &uid) == 3 &&
        local_port == port && state == kListen)
      owner = static_cast<uid_t>(uid);
  }
  std::fclose(table);
  return owner;
}

}  // namespace softrdma::wire

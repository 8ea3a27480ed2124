// Who listens on a TCP port of this host (this network namespace), as /proc/net/tcp says:
// for the notice that another user holds a softrdma port.
#pragma once

#include <sys/types.h>
#include <cstdint>
#include <optional>

namespace softrdma::wire {

/// The owner of a socket listening on `port`, if one does.
std::optional<uid_t> listener_owner(uint16_t port);

}  // namespace softrdma::wire

// The TCP ports softrdma listens on for other hosts: a base (SOFTRDMA_PORT, else 4791, RoCE
// v2's number), plus the QP number range of the user's registry.
#pragma once

#include <cstdint>

namespace softrdma {

inline constexpr uint16_t kDefaultPort = 4791;

/// The base port (SOFTRDMA_PORT overrides the default).
uint16_t base_port();
/// base_port() + `range`, or 0 past 65535.
uint16_t port_of_range(uint32_t range);
/// A TCP socket (of SOCK_STREAM | `type_flags`) bound to `port` on every address and shared
/// with this user's other processes only (SO_REUSEPORT); -1 with errno (EADDRINUSE: another
/// user, or a program of this user that does not share it, holds the port).
int bind_shared_port(uint16_t port, int type_flags);
/// Whether another user (or a program of this user that does not share it) holds `port` of
/// this host: a socket of this user's softrdma could not bind it.
bool port_held_by_another(uint16_t port);

}  // namespace softrdma

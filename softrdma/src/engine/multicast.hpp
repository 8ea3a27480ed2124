// Multicast for UD QPs, RoCE v2 style over IPv4 groups (224.0.0.0/4 as ::ffff:224.x.y.z):
// members are recorded in the host registry; a sender delivers to the members of its own
// registry on its host itself, and sends one IP multicast datagram (the TCP wire's request
// header and the payload) on the softrdma port for every other member: other hosts' and
// other users' on this host. A process with members joins the group on every interface and
// hands what arrives to its own members only, so each member receives each message once.
#pragma once

#include <sys/uio.h>
#include <cstdint>

#include "verbs/gid_table.hpp"
#include "wire/protocol.hpp"

namespace softrdma {

/// ff00::/8, or an IPv4-mapped address in 224.0.0.0/4.
bool is_multicast(const Gid& gid);

/// This process has (one more) member in IPv4 group `group`: its datagrams are received.
void multicast_join(const Gid& group);
/// One member fewer; the group is left with the last.
void multicast_leave(const Gid& group);

/// Sends the message to the group's members elsewhere (from the interface of `source`).
void multicast_transmit(const Gid& source, const wire::Request& header, const iovec* payload,
                        int count);

}  // namespace softrdma

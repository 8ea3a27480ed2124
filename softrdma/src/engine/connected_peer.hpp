// Whether a request that came from another host comes from the QP's connected peer, as a NIC
// checks every packet against the QP: the host (the one its TCP connection comes from,
// established when the connection was made, never read from a request), the QP number, and
// the user: the identity its link presented (wire/hello.hpp), which the QP pins from the
// first request that proves itself by its PSN. A request that fails is never executed and
// never moves the QP's state; the device counts it.
#pragma once

#include <atomic>
#include <cstdint>

#include "engine/shared_layout.hpp"
#include "wire/hello.hpp"

namespace softrdma {

/// Who sent the requests of one inbound connection.
struct ConnectionPeer {
  uint8_t gid[16];          // the host: IPv4-mapped address of the connection's other end
  wire::Identity identity;  // what its link's hello presented
};

enum class PeerCheck {
  kPeer,        // the QP's peer: its host, QP number and pinned identity
  kFirstProof,  // its host and QP number, and the QP has pinned no identity yet
  kForeign,     // another host, QP or user
};

/// Checks a request from `from`, claiming to come from QP `src_qpn`, to the connected QP `qp`.
PeerCheck check_peer(const QpShared& qp, const ConnectionPeer& from, uint32_t src_qpn);
/// Pins `from`'s identity as `qp`'s peer's, after a first request that proved itself (the
/// caller holds qp.responder_lock).
void pin_peer(QpShared& qp, const ConnectionPeer& from);
/// Forgets the pinned identity: the QP is connected anew (RTR) or reset.
void unpin_peer(QpShared& qp);

}  // namespace softrdma

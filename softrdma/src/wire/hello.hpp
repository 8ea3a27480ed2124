// The first bytes on a connection between hosts, each end's hello: who it is, before any
// request or answer. A link (the requester's end) and a listener (the responder's) each
// present an identity: 16 bytes of HMAC-SHA256, under their user's host secret (Registry),
// of their role and the two addresses. Every process of a user presents the same identity
// to one host, so a QP pins its peer's (engine/connected_peer.hpp): a request on a link whose
// identity is not the peer's is refused, and a link to a listener that is not the peer's is
// not used. An identity is no use to anyone who learns it: it names both ends' addresses,
// and TCP shows the receiver where a connection comes from.
#pragma once

#include <array>
#include <cstdint>

namespace softrdma::wire {

inline constexpr uint32_t kHelloMagic = 0x31485253;  // "SRH1"
/// The version of the whole wire format (hellos, requests, answers): both ends speak one.
inline constexpr uint16_t kWireVersion = 2;

using Identity = std::array<uint8_t, 16>;

enum class Role : uint8_t { kLink = 1, kListener = 2 };

struct Hello {
  uint32_t magic;
  uint16_t version;
  Role role;
  uint8_t pad;
  uint32_t uid;  // the user, as its own user namespace numbers it: for diagnostics only
  uint32_t pad2;
  Identity identity;
};
static_assert(sizeof(Hello) == 32, "the wire format is fixed");

/// This user's hello as `role`, on a connection from `own_ipv4_be` to `peer_ipv4_be`.
Hello hello_of(Role role, uint32_t own_ipv4_be, uint32_t peer_ipv4_be);
/// Why `h` is not a peer's hello in `role` ("" if it is).
const char* hello_problem(const Hello& h, Role role);

}  // namespace softrdma::wire

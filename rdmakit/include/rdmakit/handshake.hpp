// The connection handshake both back ends speak (TCP exchange and RDMA CM private data).
// Versioned; each side offers its QP's address and limits, both check that they can reach
// each other and derive the same negotiated parameters.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "rdmakit/device.hpp"
#include "rdmakit/queue_pair.hpp"

namespace rdmakit {

inline constexpr uint16_t kHandshakeVersion = 1;
/// User data that fits RDMA CM private data beside a compact offer (REQ 56, REP 196 bytes).
inline constexpr size_t kCmConnectUserData = 32;
inline constexpr size_t kCmAcceptUserData = 172;

/// What each side of a connection offers in the handshake.
struct HandshakeOffer {
  /// Handshake protocol version; both sides must match.
  uint16_t version = kHandshakeVersion;
  QpAddress address;  ///< carried by the TCP exchange; the CM carries its own
  /// Type of the GID the side uses (both must agree).
  GidType gid_type = GidType::roce_v2;
  ibv_mtu mtu = IBV_MTU_1024;  ///< the port's active MTU
  /// Inline bytes its QP takes per send.
  uint32_t inline_size = 0;
  /// Its send queue depth.
  uint32_t send_depth = 0;
  /// Its receive queue depth (or its share of an SRQ).
  uint32_t recv_depth = 0;
  /// READs/atomics it can have outstanding, in each direction.
  uint8_t rd_atomic = 0;
  /// The application's bytes for the peer.
  std::vector<std::byte> user_data;
};

/// What both ends use once they agree.
struct Negotiated {
  PathParams path;           ///< MTU and READ/atomic depths of both directions
  uint32_t inline_size = 0;  ///< the smaller of the two
  uint32_t send_window = 0;  ///< SENDs in flight towards the peer: min(our send, peer's recv)
};

/// Checks that `theirs` can talk to `ours`. Returns an error (Errc::handshake_version or
/// handshake_mismatch) and a plain explanation when not.
std::error_code check_compatible(const HandshakeOffer& ours, const HandshakeOffer& theirs,
                                 std::string& explanation);
/// Deterministic: both sides compute the same values from the same two offers.
Negotiated negotiate(const HandshakeOffer& ours, const HandshakeOffer& theirs);

/// Wire forms (little-endian). `full` carries the QP address (TCP); `compact` omits it and
/// fits RDMA CM private data (56 bytes on connect, 196 on accept, user data included).
enum class OfferForm { full, compact };
std::vector<std::byte> encode(const HandshakeOffer& offer, OfferForm form);
/// Errc::handshake_malformed if it is not one of ours; Errc::handshake_version if the
/// version differs (the fields after the version are then not decoded).
std::error_code decode(std::span<const std::byte> bytes, OfferForm form, HandshakeOffer& out);
/// Bytes of an encoded offer without user data.
size_t encoded_header_size(OfferForm form) noexcept;

}  // namespace rdmakit

// What the RC transport puts on the wire besides frames: the limits each side offers in the
// connection handshake, the hello each side SENDs once connected (where its receive rings
// are), and the 32-bit immediate of every RDMA WRITE_WITH_IMM.
//
// Each side owns two receive rings (requests, responses) in one registered region, followed
// by a control block the peer may write. A sender writes batches of whole frames into the
// peer's ring at the positions it mirrors in its own staging ring, with one WRITE_WITH_IMM
// per contiguous span; the receiver learns from the completion how many bytes arrived
// (byte_len) and from the immediate which ring they are in, so it never scans memory.
#pragma once

#include <cstdint>

#include "core/frame.hpp"

namespace rdmakit::rpc::detail::rc {

/// The connection handshake's user data (fits the 32 bytes RDMA CM allows a connect).
struct LimitsOffer {
  uint32_t magic;
  uint32_t version;
  uint32_t window;
  uint32_t max_message_bytes;
  uint32_t ring_bytes;  // this side's receive rings, each
  uint32_t reserved;    // zero
};
static_assert(sizeof(LimitsOffer) <= 32, "RDMA CM carries 32 bytes of connect data");
inline constexpr uint32_t kMagic = 0x31726b72;  // "rkr1" in little-endian bytes
inline constexpr uint32_t kVersion = 1;

/// SENT once by each side when connected: where the peer writes.
struct Hello {
  uint32_t magic;
  uint32_t rkey;  // of the receive region
  uint64_t base;  // the request ring; the response ring follows, then the control block
};
static_assert(sizeof(Hello) == 16);

/// The receive region's control block, written by the peer's RDMA WRITEs: how far the peer
/// has released our outgoing rings (the fallback when no traffic carries it).
struct ControlBlock {
  uint64_t released[2];  // by Channel: bytes of our ring the peer has released
};

/// The immediate: [kind:2][wrap:1][value:29].
///   span of requests / responses: `wrap` says the span starts at the beginning of the ring
///     (the sender skipped the rest of it); `value` is the sender's released position of its
///     other receive ring, in 16-byte units modulo 2^29 (credit returned with the traffic).
///   pulled: the receiver has read `value` more out-of-line payloads of `wrap`'s channel
///     (0: requests, 1: responses), so their grants may be revoked.
///   closing: the sender closed the session.
enum class ImmKind : uint32_t { request_span = 0, response_span = 1, pulled = 2, closing = 3 };
inline constexpr uint32_t kImmValueBits = 29;
inline constexpr uint32_t kImmValueMask = (1u << kImmValueBits) - 1;
static_assert(kFrameAlign == 16, "credits count 16-byte units");

constexpr uint32_t make_imm(ImmKind kind, bool wrap, uint32_t value) noexcept {
  return (static_cast<uint32_t>(kind) << 30) | (uint32_t{wrap} << kImmValueBits) |
         (value & kImmValueMask);
}
constexpr ImmKind imm_kind(uint32_t imm) noexcept {
  return static_cast<ImmKind>(imm >> 30);
}
constexpr bool imm_wrap(uint32_t imm) noexcept {
  return ((imm >> kImmValueBits) & 1u) != 0;
}
constexpr uint32_t imm_value(uint32_t imm) noexcept {
  return imm & kImmValueMask;
}

/// The released position a 29-bit credit (16-byte units) stands for, given the newest one
/// known. Credits from one sender only grow, but the control block and the immediates are
/// two routes, so an older credit may be read after a newer one: serial-number arithmetic
/// tells them apart, since a ring position never runs more than a ring (< 2^32 bytes, so
/// below 2^28 units) ahead of what its producer knows.
constexpr uint64_t expand_credit(uint64_t known, uint32_t credit) noexcept {
  const uint64_t units = known / kFrameAlign;
  const uint64_t ahead = (credit - units) & kImmValueMask;
  return ahead < (uint64_t{1} << (kImmValueBits - 1)) ? (units + ahead) * kFrameAlign : known;
}
static_assert(expand_credit(0, 5) == 80);
static_assert(expand_credit((uint64_t{1} << 29) * 16 + 32, 3) == ((uint64_t{1} << 29) + 3) * 16,
              "wraps modulo 2^29");
static_assert(expand_credit(64, 2) == 64, "an older credit changes nothing");

}  // namespace rdmakit::rpc::detail::rc

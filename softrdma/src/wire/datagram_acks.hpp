// Answers to datagrams that ride back in the receiving QP's own datagrams.
//
// A UD QP's message completes at its sender once the receiving host answers it: the
// answer tells the sender the message was taken, so that one read by a process that then
// ended goes out again (engine/remote_requester.cpp). In a request-and-reply exchange
// (a ping-pong, an RPC over UD) that answer is a message of its own: a system call on each
// side, on the path from one datagram to the next (two hosts' `ib_send_lat -c UD` took 1.6x
// RC's). So, as a reliable QP's requests carry acknowledgements (wire/held_acks.hpp), a
// datagram carries one for the last datagram its QP took: that datagram's requester QP
// number, its host (a tag of its GID) and its PSN. The requester counts that datagram as
// answered. The receiver still answers every datagram, for a reply may land in another
// process of the requester's user, which cannot take the acknowledgement, and a datagram left
// unanswered goes out again when its connection breaks, to be taken twice; but for
// requesters that take such acknowledgements (kTakesCarriedAcks) it holds the answers back
// (wire/held_acks.hpp) and sends them later, several in one write, off the path of the reply.
//
// An acknowledgement names one datagram, not every one before it as a reliable QP's does:
// datagrams go out again on a new connection when theirs breaks, so one sent earlier may
// still be on its way when a later one was taken.
//
// The word is packed so that processes read it whole: 24 bits of QP number, a 16-bit host
// tag and a 24-bit PSN, as a NIC's PSNs. Two requesters with one QP number on hosts whose
// tags collide may take each other's acknowledgement, for a datagram of the same PSN: the
// requester then counts as answered a datagram still on its way, which loses nothing unless
// its connection breaks (and an unreliable transport may lose it then).
#pragma once

#include <cstdint>
#include <cstring>

namespace softrdma::wire {

/// The word's QP number and PSN fields: 24 bits each, as on a NIC.
inline constexpr uint32_t k24BitField = (1u << 24) - 1;

/// The 16-bit tag of the host whose GID is `gid` (an IPv4-mapped one: its address folded).
inline uint16_t host_tag(const uint8_t* gid) {
  uint32_t ipv4;
  std::memcpy(&ipv4, gid + 12, sizeof ipv4);
  return static_cast<uint16_t>(ipv4 ^ (ipv4 >> 16));
}

/// The acknowledgement of datagram `psn` of requester QP `qpn` on the host tagged `tag`.
inline uint64_t datagram_ack(uint32_t qpn, uint16_t tag, uint32_t psn) {
  return uint64_t{qpn & k24BitField} << 40 | uint64_t{tag} << 24 | (psn & k24BitField);
}

/// Whether acknowledgement `ack` (0: none) is for requester `qpn` on the host tagged `tag`.
inline bool acknowledges(uint64_t ack, uint32_t qpn, uint16_t tag) {
  return ack != 0 && (ack >> 40) == (qpn & k24BitField) && uint16_t(ack >> 24) == tag;
}

/// The PSN of the datagram `ack` acknowledges (24 bits).
inline uint32_t acked_psn(uint64_t ack) {
  return static_cast<uint32_t>(ack) & k24BitField;
}

/// Whether a datagram of PSN `psn` (32 bits, as the requester counts) is the one acknowledged
/// as `acked` (24 bits, as the wire carries it).
inline bool is_acked(uint32_t psn, uint32_t acked) {
  return (psn & k24BitField) == acked;
}

}  // namespace softrdma::wire

// The TCP wire format between hosts: a requester's process sends requests to the softrdma
// port of the destination host; whichever softrdma process there accepts the connection
// executes them (as the responder) and answers in order.
//
// Fixed-size little-endian headers, then `payload_len` bytes. Every field is checked on
// receipt; a malformed message tears the connection down and loses nothing else.
#pragma once

#include <infiniband/verbs.h>
#include <cstdint>

namespace softrdma::wire {

inline constexpr uint32_t kMagic = 0x31445253;  // "SRD1"

/// The port that the processes owning QP `qpn` listen on: the base port plus the QP's number
/// range, one range per user of a host (ports of one process set may not be shared across
/// users). 0 when `qpn` is in no range or the port would exceed 65535.
uint16_t port_of_qpn(uint32_t qpn);
/// The port this process's listener takes (that of its own QP numbers).
uint16_t listen_port();

enum class Kind : uint8_t { kRequest = 1, kResponse = 2 };

struct Request {
  uint32_t magic;
  Kind kind;
  uint8_t opcode;   // ibv_wr_opcode
  uint8_t qp_type;  // ibv_qp_type
  uint8_t flags;    // kSolicited | kHasImm | kTakesCarriedAcks | kCarriesDatagramAck
  uint32_t dest_qpn;
  uint32_t src_qpn;
  uint32_t psn;  // 24 bits, per requester QP from its sq_psn on: executed in order
  uint32_t imm_data;
  uint32_t rkey;
  uint32_t qkey;
  uint64_t remote_addr;
  uint64_t compare_add;
  uint64_t swap;
  uint64_t length;       // the operation's length
  uint64_t payload_len;  // bytes that follow: length for SEND/WRITE, else 0
  uint8_t src_gid[16];
  uint8_t dst_gid[16];
  // RC: the sender's QP has executed the receiver's requests below this PSN, as a
  // psn::end_word (0: none yet). On a NIC those ACKs precede this request on the wire; the
  // receiver applies them first. UD, with kCarriesDatagramAck: the sender's QP took the
  // receiving QP's datagram of this 24-bit PSN (wire/datagram_acks.hpp).
  uint32_t acked_psn_end;
  uint32_t xrc_srqn;  // XRC: the SRQ of the target QP's domain that takes the request
};
static_assert(sizeof(Request) == 112, "the wire format is fixed");

inline constexpr uint8_t kSolicited = 1;
inline constexpr uint8_t kHasImm = 2;
// RC and UD: the sending QP's owner took an acknowledgement carried by the receiving QP's requests
// since its previous request, so the receiver's requests reach it (with several processes
// of a user on a host, a connection may land in another): the receiver may hold the bare
// ACK of this request back for its own next request to carry (wire/held_acks.hpp).
inline constexpr uint8_t kTakesCarriedAcks = 4;
// UD: acked_psn_end acknowledges the receiving QP's datagrams to the sending one.
inline constexpr uint8_t kCarriesDatagramAck = 8;

enum class Reply : uint8_t {
  kDone = 1,           // executed; `status` is the requester's completion status
  kRnr = 2,            // receiver not ready; retry after rnr_timer
  kNoAnswer = 3,       // dropped (no such QP, wrong state): the requester times out
  kOutOfSequence = 4,  // an earlier request must be retried first: not executed
};

struct Response {
  uint32_t magic;
  Kind kind;
  Reply reply;
  uint8_t rnr_timer;
  uint8_t pad;
  uint32_t status;   // ibv_wc_status
  uint32_t src_qpn;  // the requester's QP
  uint32_t psn;
  uint32_t pad2;
  uint64_t payload_len;  // READ data or the 8-byte original value of an atomic
};
static_assert(sizeof(Response) == 32, "the wire format is fixed");

/// True when `op` carries data from requester to responder.
bool carries_payload(uint8_t opcode);
/// Checks a received request header; false means tear the connection down.
bool valid(const Request& r);
/// Checks a received response header.
bool valid(const Response& r);

}  // namespace softrdma::wire

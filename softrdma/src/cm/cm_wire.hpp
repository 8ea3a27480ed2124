// The connection manager's messages between hosts. A listening rdma_cm_id is a TCP
// listener on the same port number (per network namespace). One TCP connection, a link,
// carries the messages of every connection a process makes to one listener: the active
// side numbers its connections on the link, and each message names its connection. A peer
// that dies closes the link, and every connection on it ends at once.
#pragma once

#include <cstdint>

namespace softrdma::cm {

inline constexpr uint32_t kCmMagic = 0x4d435253;  // "SRCM"
inline constexpr int kMaxPrivateData = 196;       // the largest any CM message carries

// IBTA CM reject reasons, as the real CM reports them in event->status.
inline constexpr int kRejectInvalidServiceId = 8;  // nobody listens on that port
inline constexpr int kRejectConsumer = 28;         // rdma_reject, a full backlog, a dropped request

enum class MsgType : uint8_t {
  kReq = 1,      // connect request (RC)
  kRep = 2,      // accept
  kRtu = 3,      // ready to use: the active side is established
  kRej = 4,      // reject
  kDreq = 5,     // disconnect
  kSidrReq = 6,  // UD "connect": ask for the service's QP number and qkey
  kSidrRep = 7,  // UD answer
  kDrep = 8,     // disconnect acknowledged: the initiator of a disconnect is told now
  kGone = 9,     // the sender's end left a connection being set up (destroyed, abandoned)
};

struct CmMsg {
  uint32_t magic;
  MsgType type;
  uint8_t port_space_udp;  // 1 for RDMA_PS_UDP
  uint8_t private_len;
  uint8_t reject_status;
  uint32_t conn;  // the connection's number on its link, chosen by the active side (not 0)
  uint32_t qpn;
  uint32_t psn;
  uint32_t qkey;
  uint8_t responder_resources;
  uint8_t initiator_depth;
  uint8_t retry_count;
  uint8_t rnr_retry_count;
  uint8_t flow_control;
  uint8_t srq;
  uint8_t pad[2];
  uint8_t gid[16];
  uint8_t private_data[kMaxPrivateData];
};
static_assert(sizeof(CmMsg) == 244, "the CM message format is fixed");

/// A message of `type` with every other field zero.
inline CmMsg make_msg(MsgType type) {
  CmMsg m{};
  m.magic = kCmMagic;
  m.type = type;
  return m;
}

/// True when a received message is well formed.
inline bool valid(const CmMsg& m) {
  return m.magic == kCmMagic && m.type >= MsgType::kReq && m.type <= MsgType::kGone &&
         m.conn != 0 && m.private_len <= kMaxPrivateData;
}

}  // namespace softrdma::cm

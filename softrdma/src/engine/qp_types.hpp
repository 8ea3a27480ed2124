// What each transport service may do (IBTA 9.7): RC is reliable and does everything; UC is
// connected but unreliable (sends and writes, no acknowledgement: the requester never learns
// a message's fate, and the responder drops what it cannot take); UD sends datagrams. XRC
// (IBTA annex A14) is RC split in two: an XRC_SEND QP posts, an XRC_RECV QP on the target
// takes its requests and delivers each into the XRC SRQ that the request names.
#pragma once

#include <infiniband/verbs.h>

namespace softrdma {

inline bool supported_qp_type(ibv_qp_type type) {
  return type == IBV_QPT_RC || type == IBV_QPT_UC || type == IBV_QPT_UD ||
         type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV;
}

/// Acknowledged service: the requester learns every message's fate, the responder fails
/// the QP on an error rather than dropping the message.
inline bool is_reliable(ibv_qp_type type) {
  return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV;
}

/// Connected to one peer QP, whose requests are the only ones it takes.
inline bool has_one_peer(ibv_qp_type type) {
  return type == IBV_QPT_RC || type == IBV_QPT_UC;
}

/// The type of QP that takes the requests of a requester QP of `type`.
inline ibv_qp_type responder_type(ibv_qp_type type) {
  return type == IBV_QPT_XRC_SEND ? IBV_QPT_XRC_RECV : type;
}

/// The QP type `type` may post `op` (and a responder of that type may take it).
inline bool opcode_allowed(ibv_qp_type type, ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return supported_qp_type(type) && type != IBV_QPT_XRC_RECV;  // which has no send queue
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return type == IBV_QPT_RC || type == IBV_QPT_UC || type == IBV_QPT_XRC_SEND;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_ATOMIC_WRITE:
      return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND;
    // The invalidate header belongs to the reliable service; the window it names is bound
    // through the receiving QP, which XRC's target QP cannot do (it has no send queue).
    case IBV_WR_SEND_WITH_INV:
      return type == IBV_QPT_RC;
    case IBV_WR_BIND_MW:  // local operations on this QP's memory windows
    case IBV_WR_LOCAL_INV:
      return type == IBV_QPT_RC || type == IBV_QPT_UC;
    default:
      return false;
  }
}

/// Carried out by the requester alone, with no message to the peer.
inline bool is_local_operation(ibv_wr_opcode op) {
  return op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV;
}

}  // namespace softrdma

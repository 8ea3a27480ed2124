// What each transport service may do (IBTA 9.7): RC is reliable and does everything; UC is
// connected but unreliable (sends and writes, no acknowledgement: the requester never learns
// a message's fate, and the responder drops what it cannot take); UD sends datagrams.
#pragma once

#include <infiniband/verbs.h>

namespace softrdma {

inline bool supported_qp_type(ibv_qp_type type) {
  return type == IBV_QPT_RC || type == IBV_QPT_UC || type == IBV_QPT_UD;
}

/// The QP type `type` may post `op` (and a responder of that type may take it).
inline bool opcode_allowed(ibv_qp_type type, ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return supported_qp_type(type);
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return type == IBV_QPT_RC || type == IBV_QPT_UC;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_SEND_WITH_INV:  // the invalidate header belongs to the reliable service
    case IBV_WR_ATOMIC_WRITE:
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

/// Connected service: the destination is the QP's dest_qp_num, not an address handle.
inline bool is_connected(ibv_qp_type type) {
  return type == IBV_QPT_RC || type == IBV_QPT_UC;
}

}  // namespace softrdma

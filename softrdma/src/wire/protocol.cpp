#include "wire/protocol.hpp"

#include <cstdlib>

#include "verbs/device_limits.hpp"

namespace softrdma::wire {

uint16_t port() {
  static const uint16_t p = [] {
    const char* env = std::getenv("SOFTRDMA_PORT");
    const long v = env ? std::strtol(env, nullptr, 10) : 0;
    return static_cast<uint16_t>(v > 0 && v < 65536 ? v : kDefaultPort);
  }();
  return p;
}

bool carries_payload(uint8_t opcode) {
  return opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM || opcode == IBV_WR_RDMA_WRITE ||
         opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

bool valid(const Request& r) {
  if (r.magic != kMagic || r.kind != Kind::kRequest) return false;
  if (r.qp_type != IBV_QPT_RC && r.qp_type != IBV_QPT_UD) return false;
  switch (r.opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      break;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      if (r.qp_type != IBV_QPT_RC) return false;
      break;
    default:
      return false;
  }
  if (r.length > limits::kMaxMsgSize) return false;
  if (r.flags & ~(kSolicited | kHasImm)) return false;
  return r.payload_len == (carries_payload(r.opcode) ? r.length : 0);
}

bool valid(const Response& r) {
  if (r.magic != kMagic || r.kind != Kind::kResponse) return false;
  if (r.reply < Reply::kDone || r.reply > Reply::kOutOfSequence) return false;
  return r.payload_len <= limits::kMaxMsgSize && r.status <= IBV_WC_GENERAL_ERR;
}

}  // namespace softrdma::wire

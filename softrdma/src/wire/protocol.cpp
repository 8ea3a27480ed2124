#include "wire/protocol.hpp"

#include "common/softrdma_port.hpp"
#include "engine/psn.hpp"
#include "engine/qp_types.hpp"
#include "engine/registry.hpp"
#include "verbs/device_limits.hpp"

namespace softrdma::wire {

uint16_t port_of_qpn(uint32_t qpn) {
  const uint32_t range = Registry::qpn_range(qpn);
  return range < Registry::kQpnRanges ? port_of_range(range) : 0;
}

uint16_t listen_port() {
  return port_of_range(Registry::instance().own_qpn_range());
}

bool carries_payload(uint8_t opcode) {
  return opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM || opcode == IBV_WR_RDMA_WRITE ||
         opcode == IBV_WR_RDMA_WRITE_WITH_IMM || opcode == IBV_WR_SEND_WITH_INV ||
         opcode == IBV_WR_ATOMIC_WRITE;
}

bool valid(const Request& r) {
  if (r.magic != kMagic || r.kind != Kind::kRequest) return false;
  const auto opcode = static_cast<ibv_wr_opcode>(r.opcode);
  if (!opcode_allowed(static_cast<ibv_qp_type>(r.qp_type), opcode) || is_local_operation(opcode))
    return false;
  if (r.length > limits::kMaxMsgSize) return false;
  if (r.flags & ~(kSolicited | kHasImm | kTakesCarriedAcks | kCarriesDatagramAck)) return false;
  if (r.xrc_srqn && r.qp_type != IBV_QPT_XRC_SEND) return false;
  if (r.psn > psn::kMask) return false;
  if ((r.flags & kCarriesDatagramAck) ? r.acked_psn_end > psn::kMask
                                      : !psn::valid_end_word(r.acked_psn_end))
    return false;
  return r.payload_len == (carries_payload(r.opcode) ? r.length : 0);
}

bool valid(const Response& r) {
  if (r.magic != kMagic || r.kind != Kind::kResponse) return false;
  if (r.reply < Reply::kDone || r.reply > Reply::kOutOfSequence) return false;
  return r.payload_len <= limits::kMaxMsgSize && r.status <= IBV_WC_GENERAL_ERR &&
         r.psn <= psn::kMask;
}

}  // namespace softrdma::wire

// The order of reliable requests from other hosts (see respond_in_sequence): the next PSN
// expected by a QP lives in its shared state, so it holds across connections and across
// the processes of this host that execute requests for the QP.
#include <cstring>

#include "engine/qp_types.hpp"
#include "engine/responder.hpp"
#include "engine/send_completion.hpp"

namespace softrdma {
namespace {

using Kind = ResponderReply::Kind;

// PSNs compare by their distance, so the sequence may wrap.
int32_t distance(uint32_t psn, uint32_t expected) {
  return static_cast<int32_t>(psn - expected);
}

AtomicReplay& replay_slot(QpShared* qp, uint32_t psn) {
  return qp->atomic_replay[psn % kAtomicReplaySlots];
}

// The request was executed already; only its answer was lost.
ResponderReply answer_again(TargetQp& t, uint32_t psn, const InboundRequest& r) {
  if (r.opcode == IBV_WR_RDMA_READ) return respond(t, r);  // reads again, as a NIC does
  if (!t.arena->owner_alive() || t.qp->dest_qpn != r.src_qpn)
    return {Kind::kNoAnswer, IBV_WC_SUCCESS, 0};
  if (is_atomic(r.opcode)) {
    const AtomicReplay& slot = replay_slot(t.qp, psn);
    if (!slot.valid || slot.psn != psn) return {Kind::kDone, IBV_WC_REM_OP_ERR, 0};
    std::memcpy(r.local[0].iov_base, &slot.original, sizeof slot.original);
  }
  return {Kind::kDone, IBV_WC_SUCCESS, 0};
}

}  // namespace

std::optional<ResponderReply> respond_in_sequence(TargetQp& t, uint32_t psn,
                                                  const InboundRequest& r) {
  QpShared* qp = t.qp;
  ProcessLockGuard guard(qp->responder_lock);
  if (qp->expected_psn_known) {
    const int32_t d = distance(psn, qp->expected_psn);
    if (d > 0) return std::nullopt;
    if (d < 0) return answer_again(t, psn, r);
  }
  const ResponderReply reply = respond(t, r);
  const bool done = reply.kind == Kind::kDone;
  if (done && is_atomic(r.opcode) && reply.status == IBV_WC_SUCCESS) {
    AtomicReplay& slot = replay_slot(qp, psn);
    slot.psn = psn;
    slot.valid = 1;
    std::memcpy(&slot.original, r.local[0].iov_base, sizeof slot.original);
  }
  qp->expected_psn = done ? psn + 1 : psn;
  qp->expected_psn_known = 1;
  return reply;
}

void restart_sequence(QpShared* qp) {
  ProcessLockGuard guard(qp->responder_lock);
  qp->expected_psn_known = 0;
  for (AtomicReplay& slot : qp->atomic_replay) slot.valid = 0;
}

}  // namespace softrdma

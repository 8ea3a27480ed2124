// The order of reliable requests from other hosts (see respond_in_sequence): the next PSN
// expected by a QP lives in its shared state, so it holds across connections and across
// the processes of this host that execute requests for the QP.
#include <cstring>

#include "engine/device_counters.hpp"
#include "engine/psn.hpp"
#include "engine/qp_types.hpp"
#include "engine/responder.hpp"
#include "engine/send_completion.hpp"

namespace softrdma {
namespace {

using Kind = ResponderReply::Kind;

// IB's half of the PSN space behind the expected one: what a duplicate may lie back.
constexpr uint32_t kMostBehind = 1u << 23;

ResponderReply no_answer() {
  return {Kind::kNoAnswer, IBV_WC_SUCCESS, 0};
}

ReplayRecord& replay_slot(QpShared* qp, uint32_t psn) {
  return qp->replay[psn % kReplaySlots];
}

void forget_replays(QpShared* qp) {
  for (ReplayRecord& slot : qp->replay) slot.kind = ReplayRecord::kNone;
}

// Notes a READ or atomic carried out, for its answer to be given again.
void record(QpShared* qp, uint32_t psn, const InboundRequest& r) {
  ReplayRecord& slot = replay_slot(qp, psn);
  slot.psn = psn;
  slot.rkey = r.rkey;
  slot.remote_addr = r.remote_addr;
  slot.length = r.length;
  if (is_atomic(r.opcode)) {
    slot.kind = ReplayRecord::kAtomic;
    std::memcpy(&slot.original, r.local[0].iov_base, sizeof slot.original);
  } else {
    slot.kind = ReplayRecord::kRead;
  }
}

// The request was executed already; only its answer was lost.
ResponderReply answer_again(TargetQp& t, uint32_t psn, const InboundRequest& r) {
  if (!t.arena->owner_alive()) return no_answer();
  const ReplayRecord& slot = replay_slot(t.qp, psn);
  const bool same = slot.psn == psn && slot.rkey == r.rkey && slot.remote_addr == r.remote_addr &&
                    slot.length == r.length;
  if (r.opcode == IBV_WR_RDMA_READ) {
    // Reads again, as a NIC does, what the READ read the first time, if it is still known.
    return same && slot.kind == ReplayRecord::kRead ? respond(t, r) : no_answer();
  }
  if (is_atomic(r.opcode)) {
    if (!same || slot.kind != ReplayRecord::kAtomic) return {Kind::kDone, IBV_WC_REM_OP_ERR, 0};
    std::memcpy(r.local[0].iov_base, &slot.original, sizeof slot.original);
  }
  return {Kind::kDone, IBV_WC_SUCCESS, 0};  // a SEND or WRITE: acknowledged, not run again
}

}  // namespace

std::optional<ResponderReply> respond_in_sequence(TargetQp& t, uint32_t psn,
                                                  const InboundRequest& r) {
  QpShared* qp = t.qp;
  ProcessLockGuard guard(qp->responder_lock);
  if (!qp->expected_psn_known) return no_answer();  // not at RTR yet
  const PeerCheck check = r.from ? check_peer(*qp, *r.from, r.src_qpn) : PeerCheck::kPeer;
  if (check == PeerCheck::kForeign) {
    count(Counter::kForeignRequests);
    return no_answer();
  }
  const int32_t d = psn::distance(psn, qp->expected_psn);
  // A link whose identity the QP has not pinned yet proves itself by the expected PSN alone,
  // and is told nothing otherwise: a NAK would say which way the sequence lies.
  if (check == PeerCheck::kFirstProof && d != 0) {
    count(Counter::kOutOfSequence);
    return no_answer();
  }
  if (d > 0) {
    count(Counter::kOutOfSequence);
    return std::nullopt;
  }
  // Behind: a duplicate only if this QP carried it out; further back it belongs to no
  // sequence of ours (a requester that started elsewhere), and is not answered.
  if (d < 0) {
    if (static_cast<uint32_t>(-d) > qp->executed_behind) {
      count(Counter::kOutOfSequence);
      return no_answer();
    }
    count(Counter::kDuplicateRequests);
    return answer_again(t, psn, r);
  }
  const ResponderReply reply = respond(t, r);
  if (check == PeerCheck::kFirstProof && reply.kind != Kind::kNoAnswer) pin_peer(*qp, *r.from);
  if (reply.kind != Kind::kDone) return reply;
  if (reply.status == IBV_WC_SUCCESS && (r.opcode == IBV_WR_RDMA_READ || is_atomic(r.opcode)))
    record(qp, psn, r);
  qp->expected_psn = psn::next(psn);
  if (qp->executed_behind < kMostBehind) ++qp->executed_behind;
  return reply;
}

void start_sequence(QpShared* qp, uint32_t rq_psn) {
  ProcessLockGuard guard(qp->responder_lock);
  qp->expected_psn = rq_psn & psn::kMask;
  qp->executed_behind = 0;
  qp->expected_psn_known = 1;
  unpin_peer(*qp);
  forget_replays(qp);
}

void restart_sequence(QpShared* qp) {
  ProcessLockGuard guard(qp->responder_lock);
  qp->expected_psn_known = 0;
  qp->executed_behind = 0;
  unpin_peer(*qp);
  forget_replays(qp);
}

bool admit_unreliable_connected(QpShared& qp, const InboundRequest& r) {
  ProcessLockGuard guard(qp.responder_lock);
  switch (check_peer(qp, *r.from, r.src_qpn)) {
    case PeerCheck::kPeer:
      return true;
    case PeerCheck::kFirstProof:
      pin_peer(qp, *r.from);
      return true;
    case PeerCheck::kForeign:
      break;
  }
  count(Counter::kForeignRequests);
  return false;
}

}  // namespace softrdma

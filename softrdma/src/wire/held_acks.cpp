#include "wire/held_acks.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "common/unlocked_count.hpp"
#include "engine/psn.hpp"
#include "wire/protocol.hpp"

namespace softrdma::wire {
namespace {

// Counted under the serving loop's lock (release() runs only there).
std::atomic<uint64_t> carried_total{0};
std::atomic<uint64_t> sent_total{0};

}  // namespace

HeldAcks::Totals HeldAcks::totals() {
  return {carried_total.load(std::memory_order_relaxed),
          sent_total.load(std::memory_order_relaxed)};
}

bool HeldAcks::may_hold() {
  if (paused_for_ == 0) return true;
  --paused_for_;
  return false;
}

void HeldAcks::hold(const TargetQp& qp, uint32_t requester_qpn, uint32_t psn) {
  if (acks_.empty()) due_ = Clock::now() + kHold;
  acks_.push_back(Ack{qp, requester_qpn, psn});
}

bool HeldAcks::carried(const Ack& a) {
  // The QP must still be the one that executed the request, connected to its requester. A
  // datagram's answer is never dropped: the acknowledgement a reply carried may have landed
  // in another process of the requester's user, and a datagram left unanswered goes out
  // again when its connection breaks, to be taken twice (wire/datagram_acks.hpp).
  if (!a.qp.current() || a.qp.qp->qp_type == IBV_QPT_UD || a.qp.qp->dest_qpn != a.requester_qpn)
    return false;
  return psn::end_covers(a.qp.qp->acked_psn_sent.load(std::memory_order_acquire), a.psn);
}

HeldAcks::Outcome HeldAcks::release(char* records, Clock::time_point now, bool all) {
  size_t kept = 0;
  for (size_t i = 0; i < acks_.size(); ++i) {
    if (carried(acks_[i])) {
      add_unlocked(carried_total, 1);
      continue;
    }
    if (kept != i) {
      std::memmove(records + kept * sizeof(Response), records + i * sizeof(Response),
                   sizeof(Response));
      acks_[kept] = std::move(acks_[i]);
    }
    ++kept;
  }
  acks_.resize(kept);
  if (kept == 0) return {0, false};
  const bool fell_due = now >= due_;
  if (!fell_due && !all) return {kept, true};
  // Datagrams' answers always fall due: only a reliable QP's held ACK that no request carried
  // shows one-way traffic.
  const bool missed = std::any_of(acks_.begin(), acks_.end(), [](const Ack& a) {
    return !a.qp.current() || a.qp.qp->qp_type != IBV_QPT_UD;
  });
  if (fell_due && missed) paused_for_ = kPauseAfterMiss;
  add_unlocked(sent_total, kept);
  acks_.clear();
  return {kept, false};
}

}  // namespace softrdma::wire

// Acknowledgements held back for a moment, so that they need not travel alone.
//
// A reliable QP's requests carry the acknowledgement of what its peer sent it
// (Request::acked_psn_end). When the application answers a request with one of its own (a
// ping-pong, an RPC's reply), an explicit ACK sent at once is redundant, and it costs a
// message, a system call on each side and, when the requester is not polling, a thread
// wake-up: about half of a round trip between two hosts that share two cores. So a bare ACK
// (a WRITE or SEND carried out, nothing to return) at the end of a connection's answers is
// held: dropped once its QP has sent a request carrying it, sent when it falls due (kHold
// after it was held) or as soon as anything else must be answered on the connection (before
// that answer, in order). A connection whose held ACKs fall due without a request to carry
// them (one-way traffic) stops holding for the next kPauseAfterMiss ones.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/responder.hpp"

namespace softrdma::wire {

/// Requests this process sent carrying an acknowledgement (Request::acked_psn_end) that can
/// let a held one go. Bumped after the QP's acked_psn_sent (release), without a locked
/// instruction: a count lost to a race between two posting threads only leaves a held ACK
/// to be sent when due, as does a request that another process of the user sent (with
/// several on a host, the QP that carries an ACK may belong to another process than the
/// one holding it). Held ACKs are looked at again only once it moved or one fell due.
inline std::atomic<uint64_t> acks_carried{0};

class HeldAcks {
 public:
  using Clock = std::chrono::steady_clock;
  /// Long enough for an application that spins on the bytes of a WRITE to see them and post
  /// its own request (a few microseconds, one system call), short against a network round trip
  /// of a requester that waits for the ACK alone.
  static constexpr std::chrono::microseconds kHold{25};
  static constexpr int kPauseAfterMiss = 4;

  /// Whether the next bare ACK may be held (counts down a pause).
  bool may_hold();
  /// Notes that the bare ACK just appended to the answers (after the held ones) is held: the
  /// answer to request `psn` of `requester_qpn` that `qp` carried out. A datagram's answer
  /// is held only to go out later, with others (wire/datagram_acks.hpp): never dropped.
  void hold(const TargetQp& qp, uint32_t requester_qpn, uint32_t psn);
  bool empty() const { return acks_.empty(); }
  size_t count() const { return acks_.size(); }
  Clock::time_point due() const { return due_; }

  /// Drops the held ACKs whose QP has sent a request carrying them, and hands over (stops
  /// holding) the others if they are due at `now` or `all`. `records` are the held answers,
  /// one per held ACK, in order; those dropped are removed, the rest keep their order. Returns
  /// how many records remain and whether they are still held.
  struct Outcome {
    size_t remaining;
    bool still_held;
  };
  Outcome release(char* records, Clock::time_point now, bool all);

  /// Of this process's held ACKs so far: those a request carried, and those sent after all.
  struct Totals {
    uint64_t carried;
    uint64_t sent;
  };
  static Totals totals();

 private:
  struct Ack {
    TargetQp qp;  // the QP the request was for: it carries the ACK in its own requests
    uint32_t requester_qpn;
    uint32_t psn;
  };
  static bool carried(const Ack& a);

  std::vector<Ack> acks_;
  Clock::time_point due_{};
  int paused_for_ = 0;
};

}  // namespace softrdma::wire

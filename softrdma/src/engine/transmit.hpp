// The requester's path to a QP on another host: requests go out over TCP (one connection
// per remote host) and complete when the answer comes back, in order (go-back-N on RNR);
// an unreliable message that cannot be delivered is lost, not retried.
#pragma once

#include <sys/uio.h>
#include <optional>

#include "engine/progress.hpp"
#include "verbs/objects.hpp"
#include "wire/protocol.hpp"

namespace softrdma {

enum class Outcome { kCompleted, kBlocked, kInFlight };

/// How often an unreliable message goes out again because its connection broke (the
/// process of the peer's user that held it ended; the kernel hands each new connection to
/// one of the user's listeners, a dying one among them) before it is lost: enough that
/// landing in a dying listener every time is improbable, few enough that a peer which
/// resets every connection gets a bounded number of copies.
inline constexpr uint8_t kMostResendsAfterABreak = 16;

/// The wire header of `w`, as another host's responder (or a multicast member) takes it.
wire::Request request_header(const Qp& qp, const SendWork& w, uint64_t length);

/// True when `w`'s destination is not on this host.
bool destination_is_remote(const Qp& qp, const SendWork& w);

/// Sends `w` (payload: the gathered local buffers). On kInFlight `w` has been moved into
/// qp.inflight; on kBlocked it waits until w.next_attempt. The caller holds qp.sq_mutex.
Outcome transmit(Qp& qp, SendWork& w, const iovec* payload, int count, uint64_t length);

/// The peer of QP `qpn` has executed its requests below `psn_end` (an acknowledgement
/// carried by the peer's own request): completes them before that request is delivered.
void apply_implied_acks(uint32_t qpn, uint32_t psn_end);

/// UD: QP `acker_qpn` on the host of `acker_gid` took UD QP `qpn`'s datagram of the 24-bit
/// PSN `acked_psn` (wire/datagram_acks.hpp): it counts as answered, and completes in posting
/// order.
void apply_datagram_ack(uint32_t qpn, const uint8_t* acker_gid, uint32_t acker_qpn,
                        uint32_t acked_psn);

/// Before `w` completes other than by its answer, or is dropped: the link it went out on
/// stops reading its payload from the application's memory (see wire/outgoing.hpp).
void release_payload(const SendWork& w);

/// Fails the oldest request in flight if its answer is overdue; returns its deadline.
std::optional<Clock::time_point> expire_inflight(Qp& qp, Clock::time_point now);

}  // namespace softrdma

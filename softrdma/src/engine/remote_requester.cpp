// The requester over TCP: sending requests, matching answers, go-back-N after an RNR or a
// lost connection, and the ACK timeout of requests in flight.
#include <algorithm>
#include <cstring>

#include "common/current_pid.hpp"
#include "common/log.hpp"
#include "common/unlocked_count.hpp"
#include "engine/local_payload.hpp"
#include "engine/progress.hpp"
#include "engine/psn.hpp"
#include "engine/qp_types.hpp"
#include "engine/registry.hpp"
#include "engine/send_completion.hpp"
#include "engine/transmit.hpp"
#include "wire/datagram_acks.hpp"
#include "wire/held_acks.hpp"
#include "wire/link.hpp"

namespace softrdma {
namespace {

const uint8_t* destination_gid(const Qp& qp, const SendWork& w) {
  return qp.qpx.qp_base.qp_type == IBV_QPT_UD ? w.dgid.data() : qp.attr.ah_attr.grh.dgid.raw;
}

uint32_t destination_qpn(const Qp& qp, const SendWork& w) {
  return qp.qpx.qp_base.qp_type == IBV_QPT_UD ? w.remote_qpn : qp.attr.dest_qp_num;
}

// The connection to the host and port that serve `w`'s destination (made on demand);
// null when it cannot be reached now. The caller holds qp.sq_mutex. A reference to the QP's
// own, which stays until the next call: a copy would count it up and down again, two
// locked instructions on every request's path.
const std::shared_ptr<wire::Link>& link_for(Qp& qp, const SendWork& w) {
  static const std::shared_ptr<wire::Link> unreachable;
  Gid dgid;
  std::memcpy(dgid.data(), destination_gid(qp, w), 16);
  if (!GidTable::is_ipv4_mapped(dgid)) return unreachable;
  const uint32_t ipv4_be = GidTable::ipv4_of(dgid);
  const uint16_t port = wire::port_of_qpn(destination_qpn(qp, w));
  // A connected QP's requests leave from its own GID's address, where its peer expects them.
  const bool connected = qp.qpx.qp_base.qp_type != IBV_QPT_UD;
  const Gid sgid = qp.ctx->gids.at(qp.attr.ah_attr.grh.sgid_index);
  const uint32_t src_ipv4_be =
      connected && GidTable::is_ipv4_mapped(sgid) ? GidTable::ipv4_of(sgid) : 0;
  Qp::LastLink& last = qp.last_link;
  if (last.link && last.src_ipv4_be == src_ipv4_be && last.ipv4_be == ipv4_be &&
      last.port == port && last.pid == current_pid() && last.link->alive())
    return last.link;
  std::shared_ptr<wire::Link> link = wire::Link::to(src_ipv4_be, ipv4_be, port);
  if (link && connected && qp.responder_identity) {
    // The listener that served the QP's peer before, or none: one another user put on the
    // port since is not sent to (a link not greeted yet checks when its hello comes).
    if (!link->greeted()) {
      link->expect_listener(*qp.responder_identity);
    } else if (link->listener_identity() != *qp.responder_identity) {
      SOFTRDMA_NOTICE(
          "QP %u: the listener at port %u of its peer's host is not the one that served its "
          "peer before (another user holds the port?): not sent there",
          qp.qpx.qp_base.qp_num, port);
      link = nullptr;
    }
  }
  last = {std::move(link), src_ipv4_be, ipv4_be, port, current_pid()};
  return last.link;
}

}  // namespace

wire::Request request_header(const Qp& qp, const SendWork& w, uint64_t length) {
  wire::Request h{};
  h.magic = wire::kMagic;
  h.kind = wire::Kind::kRequest;
  h.opcode = static_cast<uint8_t>(w.opcode);
  h.qp_type = static_cast<uint8_t>(qp.qpx.qp_base.qp_type);
  h.flags = static_cast<uint8_t>(
      ((w.send_flags & IBV_SEND_SOLICITED) ? wire::kSolicited : 0) |
      ((w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) ? wire::kHasImm
                                                                                    : 0));
  h.dest_qpn = destination_qpn(qp, w);
  h.src_qpn = qp.qpx.qp_base.qp_num;
  h.psn = w.psn;
  h.imm_data = w.imm_data;
  h.rkey = w.rkey;
  h.qkey = w.remote_qkey;
  h.xrc_srqn = w.xrc_srqn;
  h.remote_addr = w.remote_addr;
  h.compare_add = w.compare_add;
  h.swap = w.swap;
  h.length = length;
  h.payload_len = wire::carries_payload(h.opcode) ? length : 0;
  const Gid sgid = qp.ctx->gids.at(qp.attr.ah_attr.grh.sgid_index);
  std::memcpy(h.src_gid, sgid.data(), 16);
  std::memcpy(h.dst_gid, destination_gid(qp, w), 16);
  if (qp.qpx.qp_base.qp_type == IBV_QPT_RC)
    h.acked_psn_end = qp.shared->peer_psn_end.load(std::memory_order_acquire);
  if (qp.qpx.qp_base.qp_type == IBV_QPT_UD) {
    const uint64_t ack = qp.shared->datagram_peer_ack.load(std::memory_order_acquire);
    if (wire::acknowledges(ack, h.dest_qpn, wire::host_tag(h.dst_gid))) {
      h.acked_psn_end = wire::acked_psn(ack);
      h.flags |= wire::kCarriesDatagramAck;
    }
  }
  return h;
}

namespace {

// Puts `w` and everything sent after it back in front of the blocked work, in order: the
// responder refuses requests that follow one it did not execute.
void go_back(Qp& qp, SendWork&& w) {
  for (SendWork& later : qp.inflight) {
    later.next_attempt = w.next_attempt;
    later.give_up = Clock::time_point{};  // its ACK timer starts again when it is resent
  }
  qp.blocked.splice(qp.blocked.begin(), qp.inflight);
  qp.blocked.push_front(std::move(w));
  progress_schedule(&qp, qp.blocked.front().next_attempt);
}

// READ data and atomic results land in the requester's own registered buffers.
bool deliver_result(Qp& qp, const SendWork& w, std::span<const char> payload) {
  PinnedRanges dest;
  if (!pin_sge_list(dest, w.sges.at, w.sges.count, self_process(), qp.pd_id,
                    IBV_ACCESS_LOCAL_WRITE))
    return false;
  iovec src{const_cast<char*>(payload.data()), std::min<size_t>(payload.size(), dest.total())};
  return copy_to_process(self_process(), &src, src.iov_len ? 1 : 0, dest.iov(), dest.count()) == 0;
}

}  // namespace

bool destination_is_remote(const Qp& qp, const SendWork& w) {
  // A QP of another user on this host is reached through its listener, like another host's.
  if (qp.qpx.qp_base.qp_type == IBV_QPT_UD)
    return !qp.ctx->gids.contains(w.dgid) || !Registry::instance().owns_qpn(w.remote_qpn);
  return !qp.peer_on_this_host;
}

namespace {

bool unreliable(const Qp& qp) {
  return !is_reliable(qp.qpx.qp_base.qp_type);
}

// An unreliable QP's message that went astray (no connection, no answer) is lost: as on a
// NIC, it completes as sent, and the QP goes on.
void complete_lost(Qp& qp, const SendWork& w, const char* why) {
  SOFTRDMA_DEBUG_LOG("QP %u: message %u to QP %u lost (%s)", qp.qpx.qp_base.qp_num, w.psn,
                     destination_qpn(qp, w), why);
  release_payload(w);
  complete(qp, w, IBV_WC_SUCCESS);
}

// A request that could not be sent fails once its retry budget is spent (an unreliable
// one is lost at once), but never before an earlier request still in flight: completions
// keep posting order, so it waits for that one's answer, or for its failure, which
// flushes this one too.
Outcome not_sent(Qp& qp, SendWork& w, Clock::time_point now) {
  constexpr auto kWaitBehindEarlier = std::chrono::milliseconds(1);
  if (!qp.inflight.empty()) {
    w.next_attempt = now + kWaitBehindEarlier;
    return Outcome::kBlocked;
  }
  if (unreliable(qp)) {
    complete_lost(qp, w, "could not be sent");
    return Outcome::kCompleted;
  }
  return retries_exhausted(qp, w, now) ? Outcome::kCompleted : Outcome::kBlocked;
}

// Completes, in posting order, the answered unreliable requests at the front of the
// queue in flight; the next one's wait for its answer starts now.
void complete_answered_front(Qp& qp, Clock::time_point now) {
  bool completed = false;
  while (!qp.inflight.empty() && qp.inflight.front().answered) {
    complete(qp, qp.inflight.front(), IBV_WC_SUCCESS);
    qp.inflight.pop_front();
    completed = true;
  }
  if (completed && !qp.inflight.empty()) qp.inflight.front().give_up = answer_deadline(qp, now);
}

}  // namespace

Outcome transmit(Qp& qp, SendWork& w, const iovec* payload, int count, uint64_t length) {
  const auto now = Clock::now();
  const std::shared_ptr<wire::Link>* link = &link_for(qp, w);
  if (!*link) return not_sent(qp, w, now);
  if (!w.has_psn) {
    w.psn = qp.next_psn;
    qp.next_psn = psn::next(qp.next_psn);
    w.has_psn = true;
  }
  if (w.give_up == Clock::time_point{}) {
    retries_exhausted(qp, w, now);  // starts the ACK-timeout budget
    w.next_attempt = Clock::time_point{};
  }
  wire::Request header = request_header(qp, w, length);
  if (qp.took_carried_ack) header.flags |= wire::kTakesCarriedAcks;
  qp.took_carried_ack = false;
  if (qp.qpx.qp_base.qp_type == IBV_QPT_UD) {
    qp.last_datagram_gid = w.dgid;
    qp.last_datagram_qpn = w.remote_qpn;
  }
  const bool may_borrow = payload_may_be_borrowed(w);
  const int payload_count = wire::carries_payload(header.opcode) ? count : 0;
  w.link = *link;
  w.answered = false;
  // In the in-flight list before it is sent: the answer may arrive at once.
  qp.inflight.push_back(std::move(w));
  auto sent = (*link)->send(header, payload, payload_count, may_borrow);
  // The connection broke under this send: the process of the peer's user that held it may
  // have ended while another serves the port. An unreliable message goes out again on a
  // new connection rather than being lost (a reliable one is retried in any case); again
  // while each new one is reset at once (resend_on_a_new_connection says why).
  while (sent == wire::Link::Sent::kFailed && unreliable(qp) &&
         qp.inflight.back().resends < kMostResendsAfterABreak &&
         *(link = &link_for(qp, qp.inflight.back()))) {
    qp.inflight.back().link = *link;
    ++qp.inflight.back().resends;
    sent = (*link)->send(header, payload, payload_count, may_borrow);
  }
  if (sent == wire::Link::Sent::kFailed) {
    SendWork back = std::move(qp.inflight.back());
    qp.inflight.pop_back();
    w = std::move(back);
    return not_sent(qp, w, now);
  }
  // The acknowledgement this request carries lets the peer drop the one it holds back
  // (wire/held_acks.hpp), but only if it travels now: one queued behind a backlog of large
  // payloads would come later than the peer's own ACK, and its requests would time out.
  // Under the send-queue lock, and peer_psn_end only grows: a store keeps the largest.
  if (sent == wire::Link::Sent::kHeaderNow && header.qp_type == IBV_QPT_RC &&
      psn::end_known(header.acked_psn_end)) {
    qp.shared->acked_psn_sent.store(header.acked_psn_end, std::memory_order_release);
    add_unlocked(wire::acks_carried, 1, std::memory_order_release);
  }
  if (qp.inflight.front().give_up != Clock::time_point::max())
    progress_schedule(&qp, qp.inflight.front().give_up);
  return Outcome::kInFlight;
}

void release_payload(const SendWork& w) {
  if (w.link) w.link->stop_borrowing();
}

std::optional<Clock::time_point> expire_inflight(Qp& qp, Clock::time_point now) {
  if (qp.inflight.empty()) return std::nullopt;
  SendWork& oldest = qp.inflight.front();
  if (now < oldest.give_up) return oldest.give_up;
  // A NIC restarts the timer on every acknowledged packet, so a large request on a slow
  // link never times out while it moves. Here a request is one message on a socket that
  // other QPs share too: the timer is extended while the connection moves bytes either way
  // (the first expiry only takes note, so a stuck peer is found after at most two spans).
  // A request the responder refused (kNoAnswer) moves nothing of its own: its budget is time
  // alone, whatever else the connection carries (a peer whose PSNs do not match ours answers
  // every resend at once).
  if (!oldest.refused && oldest.link && oldest.link->alive()) {
    const uint64_t moved = oldest.link->progress();
    if (oldest.link_progress != moved) {
      oldest.link_progress = moved;
      oldest.give_up = answer_deadline(qp, now);
      return oldest.give_up;
    }
  }
  SendWork w = std::move(oldest);
  qp.inflight.pop_front();
  if (unreliable(qp)) {
    complete_lost(qp, w, "no answer in time");
    if (qp.inflight.empty()) return std::nullopt;
    qp.inflight.front().give_up = answer_deadline(qp, now);
    complete_answered_front(qp, now);
    return qp.inflight.empty() ? std::nullopt : std::optional(qp.inflight.front().give_up);
  }
  fail(qp, w, IBV_WC_RETRY_EXC_ERR);
  for (const SendWork& rest : qp.inflight) flush_one(qp, rest);
  qp.inflight.clear();
  return std::nullopt;
}

namespace {

// Notes that the peer executed this QP's requests below `psn_end`, and completes from the
// front those it covers. Requests whose answer carries data (READ, atomics) wait for that
// answer, and what follows them waits behind them. Caller holds the send-queue lock.
void acknowledged_below(Qp& qp, uint32_t psn_end) {
  if (!qp.implied_acks_known || psn::distance(psn_end, qp.implied_acked_end) > 0) {
    qp.implied_acked_end = psn_end;
    qp.implied_acks_known = true;
  }
  bool completed = false;
  while (!qp.inflight.empty() && psn::distance(qp.inflight.front().psn, qp.implied_acked_end) < 0 &&
         qp.inflight.front().opcode != IBV_WR_RDMA_READ && !is_atomic(qp.inflight.front().opcode)) {
    complete(qp, qp.inflight.front(), IBV_WC_SUCCESS);
    qp.inflight.pop_front();
    completed = true;
  }
  // As an answer does, an acknowledgement restarts the ACK timer for the next request.
  if (completed && !qp.inflight.empty())
    qp.inflight.front().give_up = answer_deadline(qp, Clock::now());
}

}  // namespace

void apply_implied_acks(uint32_t qpn, uint32_t psn_end) {
  // Only when this process owns the QP (the usual case).
  with_local_qp(qpn, [psn_end](Qp& qp) {
    BiasedLock::Guard lock(qp.sq_mutex);
    qp.took_carried_ack = true;
    acknowledged_below(qp, psn_end);
  });
}

void apply_datagram_ack(uint32_t qpn, const uint8_t* acker_gid, uint32_t acker_qpn,
                        uint32_t acked_psn) {
  with_local_qp(qpn, [&](Qp& qp) {
    if (qp.qpx.qp_base.qp_type != IBV_QPT_UD) return;
    BiasedLock::Guard lock(qp.sq_mutex);
    // Only from where the QP's last datagram went: the acknowledgements of a peer that names
    // itself otherwise than this QP addresses it (another of its GIDs) never match, and its
    // answers must not be held for them.
    if (qp.last_datagram_qpn == acker_qpn &&
        std::memcmp(qp.last_datagram_gid.data(), acker_gid, 16) == 0)
      qp.took_carried_ack = true;
    for (SendWork& w : qp.inflight)
      if (w.remote_qpn == acker_qpn && std::memcmp(w.dgid.data(), acker_gid, 16) == 0 &&
          wire::is_acked(w.psn, acked_psn))
        w.answered = true;
    complete_answered_front(qp, Clock::now());
  });
}

namespace wire {

namespace {

// Sends `w` again, on `link`, where it stands in the queue in flight. Its ACK timer runs on
// from its first sending.
bool send_again(Qp& qp, SendWork& w, const std::shared_ptr<Link>& link) {
  LocalPayload local;
  if (!gather_local_payload(qp, w, local)) return false;
  const Request header = request_header(qp, w, payload_length(w));
  const bool may_borrow = payload_may_be_borrowed(w);
  w.link = link;
  w.link_progress.reset();  // counted on the old link
  ++w.resends;
  return link->send(header, local.iov, carries_payload(header.opcode) ? local.count : 0,
                    may_borrow) != Link::Sent::kFailed;
}

// The connection that takes the messages of a broken one: every request on that one went to
// one host and port.
struct Replacement {
  std::shared_ptr<Link> link;
  bool unreachable = false;
};

// Sends `w` again on `replacement`, and on a new connection while each is found reset when
// written to: connections queued at the listener of a process of the peer's user that ends
// are reset when it closes, and the next lands in another (wire/link.cpp makes one reset
// while it is made again). At most kMostResendsAfterABreak sends of `w` in all.
bool resend_on_a_new_connection(Qp& qp, SendWork& w, Replacement& replacement) {
  while (w.resends < kMostResendsAfterABreak && !replacement.unreachable) {
    if (!replacement.link || !replacement.link->alive()) replacement.link = link_for(qp, w);
    if (!replacement.link) {
      replacement.unreachable = true;
      break;
    }
    if (send_again(qp, w, replacement.link)) return true;
    if (replacement.link->alive()) break;  // its payload could not be gathered
  }
  return false;
}

// An unreliable QP's messages that went out on `broken` and were not answered go out again
// on a new connection (another process of the peer's user may serve its port now), in their
// places: completions keep posting order, and those in flight to other peers are not sent
// twice. One that cannot be sent again, or was kMostResendsAfterABreak times already, is
// lost; so is a UC message that would arrive behind one posted after it that already took a
// new connection (UC loses messages but never reorders them).
void send_unanswered_again(Qp& qp, const Link& broken) {
  const bool uc_order_broken =
      qp.qpx.qp_base.qp_type == IBV_QPT_UC &&
      std::any_of(qp.inflight.begin(), qp.inflight.end(),
                  [&broken](const SendWork& w) { return w.link.get() != &broken; });
  Replacement replacement;
  for (SendWork& w : qp.inflight) {
    if (w.link.get() != &broken || w.answered) continue;
    if (!uc_order_broken && resend_on_a_new_connection(qp, w, replacement)) continue;
    SOFTRDMA_DEBUG_LOG("QP %u: message %u to QP %u lost (its connection broke)",
                       qp.qpx.qp_base.qp_num, w.psn, destination_qpn(qp, w));
    release_payload(w);
    w.answered = true;  // completes in its turn, as sent
  }
  complete_answered_front(qp, Clock::now());
}

void answer_received(Qp* qp, Link& link, const Response& r, std::span<const char> payload) {
  BiasedLock::Guard lock(qp->sq_mutex);
  // A connected QP pins the listener that answered it first (link_for).
  if (qp->qpx.qp_base.qp_type != IBV_QPT_UD) {
    if (!qp->responder_identity) qp->responder_identity = link.listener_identity();
    if (*qp->responder_identity != link.listener_identity()) return;  // not its peer's
  }
  // The responder executes a reliable QP's requests in order, so an answer that is not a
  // sequence NAK acknowledges every request before it, as on a NIC: one whose own ACK it
  // held back (wire/held_acks.hpp) may still wait here for the request that carried it.
  if (qp->qpx.qp_base.qp_type == IBV_QPT_RC && (r.reply == Reply::kDone || r.reply == Reply::kRnr))
    acknowledged_below(*qp, r.psn);
  // An unreliable QP is done with a message whatever its answer says (UC has no
  // acknowledgements, a datagram is delivered or dropped). Its requests go out on the links
  // of several peers (UD), whose answers may come in any order: each is noted, and the
  // requests complete in posting order.
  if (unreliable(*qp)) {
    for (SendWork& w : qp->inflight)
      if (w.psn == r.psn && w.link.get() == &link) w.answered = true;
    complete_answered_front(*qp, Clock::now());
    return;
  }
  // Answers come in order; anything else is an answer to a request already given up.
  if (qp->inflight.empty() || qp->inflight.front().psn != r.psn ||
      qp->inflight.front().link.get() != &link)
    return;
  SendWork w = std::move(qp->inflight.front());
  qp->inflight.pop_front();
  const auto now = Clock::now();
  // Like a NIC's transport timer, the ACK timeout measures time without progress: an
  // answer restarts it for the next request in flight.
  if (!qp->inflight.empty()) qp->inflight.front().give_up = answer_deadline(*qp, now);
  bool failed = false;
  switch (r.reply) {
    case Reply::kDone:
      if (r.status != IBV_WC_SUCCESS) {
        fail(*qp, w, static_cast<ibv_wc_status>(r.status));
        failed = true;
      } else if ((w.opcode == IBV_WR_RDMA_READ || is_atomic(w.opcode)) &&
                 !deliver_result(*qp, w, payload)) {
        fail(*qp, w, IBV_WC_LOC_PROT_ERR);
        failed = true;
      } else {
        complete(*qp, w, IBV_WC_SUCCESS);
        acknowledged_below(*qp, r.psn);  // what was acknowledged behind a READ or atomic
      }
      break;
    // An RNR is an answer: as on a NIC, the retransmission starts the ACK timer afresh (only
    // kNoAnswer and repeated sequence NAKs use up the retry budget), so a receiver that is
    // slow to post receives costs RNR retries, never a transport retry error.
    case Reply::kRnr:
      failed = rnr_exhausted(*qp, w, r.rnr_timer, now);
      w.give_up = Clock::time_point{};
      if (!failed) go_back(*qp, std::move(w));
      break;
    case Reply::kNoAnswer:
      w.refused = true;
      failed = retries_exhausted(*qp, w, now);
      if (!failed) go_back(*qp, std::move(w));
      break;
    // The first sequence NAK of a request sends it again at once (its connection broke and
    // an earlier one is on its way again). NAKs that go on say the requester's sequence is not
    // the responder's (PSNs that do not match), and use up the retry budget, as on a NIC.
    case Reply::kOutOfSequence:
      if (w.sequence_naks++ == 0) {
        w.next_attempt = now;
        w.give_up = Clock::time_point{};
      } else {
        failed = retries_exhausted(*qp, w, now);
      }
      if (!failed) go_back(*qp, std::move(w));
      break;
  }
  if (failed) {
    for (const SendWork& rest : qp->inflight) flush_one(*qp, rest);
    qp->inflight.clear();
    progress_schedule(qp, now);  // flushes what waits in the blocked queue
  }
}

}  // namespace

void on_response(Link& link, const Response& r, std::span<const char> payload) {
  // The QP cannot be destroyed while its answer is handled.
  with_local_qp(r.src_qpn, [&](Qp& qp) { answer_received(&qp, link, r, payload); });
}

void on_link_down(Link& link) {
  for_each_local_qp([&link](Qp& qp) {
    BiasedLock::Guard lock(qp.sq_mutex);
    if (unreliable(qp)) {
      send_unanswered_again(qp, link);
      return;
    }
    if (qp.inflight.empty() || qp.inflight.front().link.get() != &link) return;
    SendWork w = std::move(qp.inflight.front());
    qp.inflight.pop_front();
    if (retries_exhausted(qp, w, Clock::now())) {
      for (const SendWork& rest : qp.inflight) flush_one(qp, rest);
      qp.inflight.clear();
      progress_schedule(&qp, Clock::now());
    } else {
      go_back(qp, std::move(w));
    }
  });
}

}  // namespace wire
}  // namespace softrdma

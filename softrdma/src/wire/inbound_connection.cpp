#include "wire/inbound_connection.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/log.hpp"
#include "common/unlocked_count.hpp"
#include "engine/psn.hpp"
#include "engine/qp_types.hpp"
#include "engine/responder.hpp"
#include "engine/transmit.hpp"
#include "wire/datagram_acks.hpp"
#include "wire/hello.hpp"
#include "wire/peer_penalties.hpp"
#include "wire/protocol.hpp"
#include "wire/socket_io.hpp"
#include "wire/socket_tail.hpp"

namespace softrdma::wire {
namespace {

// The acknowledgement the QP's own requests carry back is cumulative: a duplicate answered
// again (an older PSN) must not move it back.
void advance_peer_psn_end(QpShared* qp, uint32_t executed) {
  const uint32_t end = psn::end_word(psn::next(executed));
  uint32_t seen = qp->peer_psn_end.load(std::memory_order_acquire);
  while (!psn::end_covers(seen, executed) &&
         !qp->peer_psn_end.compare_exchange_weak(seen, end, std::memory_order_release,
                                                 std::memory_order_acquire)) {
  }
}

// Bytes asked of the socket per read when no larger message is in progress.
constexpr size_t kReadChunk = size_t{64} << 10;
// Most asked of the socket per read while a large message arrives.
constexpr size_t kLargeRead = size_t{4} << 20;
static_assert(kReadChunk <= kLargeRead);
// A read shorter than this is a message or a few, as a ping-pong brings, not a stream; a
// peek reads at most this much.
constexpr size_t kShortRead = size_t{4} << 10;
static_assert(kShortRead <= kReadChunk);
// A payload at least this long is read straight into its destination once it waits whole
// in the socket (land_waiting_payload); shorter ones come with their header in one read.
constexpr size_t kLandAtLeast = size_t{16} << 10;
static_assert(kLandAtLeast > kShortRead);
// Reads per readiness event, so one busy peer does not starve the others.
constexpr int kReadsPerEvent = 16;
// Answers are handed to the socket once this many wait, so the first ones travel while
// later requests of the same batch still execute.
constexpr size_t kEagerFlush = size_t{256} << 10;
static_assert(kEagerFlush < InboundConnection::kMaxPendingOutput);

Reply to_reply(ResponderReply::Kind k) {
  switch (k) {
    case ResponderReply::Kind::kDone:
      return Reply::kDone;
    case ResponderReply::Kind::kRnr:
      return Reply::kRnr;
    default:
      return Reply::kNoAnswer;
  }
}

// A WRITE or SEND carried out, or a datagram taken: its answer is a bare acknowledgement,
// which the target QP's own next request may carry instead (READ and atomics answer with
// data; wire/datagram_acks.hpp for datagrams).
bool answered_by_bare_ack(const Request& h, const Response& resp) {
  const bool write_or_send = h.opcode == IBV_WR_RDMA_WRITE ||
                             h.opcode == IBV_WR_RDMA_WRITE_WITH_IMM || h.opcode == IBV_WR_SEND ||
                             h.opcode == IBV_WR_SEND_WITH_IMM || h.opcode == IBV_WR_SEND_WITH_INV;
  const bool carried_back = (write_or_send && h.qp_type == IBV_QPT_RC) || h.qp_type == IBV_QPT_UD;
  return carried_back && resp.reply == Reply::kDone && resp.status == IBV_WC_SUCCESS &&
         resp.payload_len == 0;
}

// Our QP's requests reach the requester's owner (see kTakesCarriedAcks).
bool ack_may_ride_back(const Request& h) {
  return h.flags & kTakesCarriedAcks;
}

void append(std::vector<char>& out, const void* bytes, size_t n) {
  const char* p = static_cast<const char*>(bytes);
  out.insert(out.end(), p, p + n);
}

// The payloads a NIC would place as they arrive: a SEND's or a WRITE's.
bool lands_in_place(const Request& h) {
  switch (h.opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return h.payload_len >= kLandAtLeast;
    default:
      return false;
  }
}

// Counted under the serving loop's lock (every connection is served under it).
std::atomic<uint64_t> large_total{0};
std::atomic<uint64_t> landed_total{0};
}  // namespace

InboundRequest to_inbound(const Request& h, const iovec* local, int count) {
  InboundRequest r;
  r.opcode = static_cast<ibv_wr_opcode>(h.opcode);
  r.qp_type = static_cast<ibv_qp_type>(h.qp_type);
  r.src_qpn = h.src_qpn;
  std::memcpy(r.src_gid, h.src_gid, 16);
  std::memcpy(r.dst_gid, h.dst_gid, 16);
  r.solicited = h.flags & kSolicited;
  r.has_imm = h.flags & kHasImm;
  r.imm_data = h.imm_data;
  r.remote_addr = h.remote_addr;
  r.rkey = h.rkey;
  r.compare_add = h.compare_add;
  r.swap = h.swap;
  r.qkey = h.qkey;
  r.xrc_srqn = h.xrc_srqn;
  r.local = local;
  r.local_count = count;
  r.length = h.length;
  return r;
}

InboundConnection::InboundConnection(int fd) : fd_(fd), accepted_at_(Clock::now()) {
  tune_data_socket(fd_);
  // The host is where the connection comes from, as the kernel says, never what a request
  // claims.
  sockaddr_in own{}, peer{};
  socklen_t own_length = sizeof own, peer_length = sizeof peer;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&own), &own_length) == 0 &&
      getpeername(fd_, reinterpret_cast<sockaddr*>(&peer), &peer_length) == 0 &&
      own.sin_family == AF_INET && peer.sin_family == AF_INET) {
    own_ipv4_be_ = own.sin_addr.s_addr;
    peer_.gid[10] = peer_.gid[11] = 0xff;
    std::memcpy(peer_.gid + 12, &peer.sin_addr.s_addr, 4);
  }
  // Ours first: the link waits for it before it sends any request.
  const Hello hello = hello_of(Role::kListener, own_ipv4_be_, peer.sin_addr.s_addr);
  append(output_, &hello, sizeof hello);
  sendable_end_ = output_.size();
  flush();
}

bool InboundConnection::take_hello() {
  if (filled_ - consumed_ < sizeof(Hello)) return true;
  Hello hello;
  std::memcpy(&hello, input_.data() + consumed_, sizeof hello);
  const char* problem = hello_problem(hello, Role::kLink);
  if (*problem) {
    count(Counter::kBadHellos);
    SOFTRDMA_NOTICE("refused a connection from another host: %s", problem);
    return false;
  }
  peer_.identity = hello.identity;
  if (peer_penalties().refused(peer_, Clock::now())) {
    count(Counter::kPeersRefused);
    SOFTRDMA_NOTICE("refused a connection of a peer that caused too many remote access errors");
    return false;
  }
  consumed_ += sizeof hello;
  hello_done_ = true;
  return true;
}

std::optional<Counter> InboundConnection::refusal_while_unproven(const Request& h) {
  if (!resolve_target(h.dest_qpn)) return Counter::kForeignRequests;
  const QpShared& qp = *target_.qp;
  if (h.qp_type == IBV_QPT_UD) {
    if (h.qkey != qp.qkey) return Counter::kForeignRequests;
    return std::nullopt;
  }
  switch (check_peer(qp, peer_, h.src_qpn)) {
    case PeerCheck::kForeign:
      return Counter::kForeignRequests;
    case PeerCheck::kPeer:
      return std::nullopt;
    case PeerCheck::kFirstProof:
      break;
  }
  // Read unlocked: a guess. The request itself is judged under the QP's lock.
  const uint32_t expected =
      std::atomic_ref(target_.qp->expected_psn).load(std::memory_order_relaxed);
  if (!is_reliable(static_cast<ibv_qp_type>(h.qp_type)) || h.psn == expected) return std::nullopt;
  return Counter::kOutOfSequence;
}

void InboundConnection::note_refused() {
  if (!proven_ && ++refused_ >= kMostRefusedUnproven) closing_ = true;
}

void InboundConnection::refuse(const Request& h, Counter why) {
  count(why);
  note_refused();
  Response resp{};
  resp.magic = kMagic;
  resp.kind = Kind::kResponse;
  resp.reply = Reply::kNoAnswer;
  resp.src_qpn = h.src_qpn;
  resp.psn = h.psn;
  send_held_first();
  append(output_, &resp, sizeof resp);
  sendable_end_ = output_.size();
}

bool InboundConnection::discard_refused_payload() {
  char dropped[4096];
  while (discard_ > 0) {
    // MSG_TRUNC: the kernel drops the bytes; the sanitizers' recv wants a buffer all the same.
    const ssize_t r =
        recv_now(fd_, dropped, std::min(discard_, sizeof dropped), MSG_TRUNC | MSG_DONTWAIT);
    if (r == 0) return false;
    if (r < 0) return errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK;
    discard_ -= static_cast<size_t>(r);
    received_ += static_cast<uint64_t>(r);
    took_from_socket(static_cast<size_t>(r));
  }
  return true;
}

InboundConnection::~InboundConnection() {
  consume_peeked();
  close(fd_);
}

InboundConnection::LandingTotals InboundConnection::landing_totals() {
  const uint64_t landed = landed_total.load(std::memory_order_relaxed);
  return {landed, landed + large_total.load(std::memory_order_relaxed)};
}

bool InboundConnection::consume_peeked() {
  const size_t n = peeked_;
  peeked_ = 0;
  took_from_socket(n);
  return drop_bytes(fd_, n);
}

bool InboundConnection::land_waiting_payload(bool& landed) {
  landed = false;
  if (!hello_done_ || discard_ > 0) return true;
  const size_t have = filled_ - consumed_;
  if (have < sizeof(Request)) return true;
  Request h;
  std::memcpy(&h, input_.data() + consumed_, sizeof h);
  if (!valid(h) || !lands_in_place(h)) return true;
  const size_t buffered = have - sizeof h;
  if (buffered >= h.payload_len) return true;  // all read already
  const size_t rest = h.payload_len - buffered;
  // The kernel is asked only when what is known to wait does not cover the payload, and
  // not again before more was read (a poll that finds nothing asks nothing).
  if (known_waiting_ < rest) {
    if (received_ == asked_at_) return true;
    asked_at_ = received_;
    known_waiting_ = bytes_waiting(fd_);
    if (known_waiting_ < rest) return true;  // read on into the buffer meanwhile
  }
  if (!proven_ && refusal_while_unproven(h)) return true;  // refused from the buffer instead
  add_unlocked(landed_total, 1);
  Request next;
  SocketTail tail(fd_, rest, reinterpret_cast<char*>(&next), sizeof next);
  execute(h, input_.data() + consumed_ + sizeof h, buffered, &tail);
  // A request not carried out (RNR, out of sequence, an error) leaves its payload unread.
  if (!tail.drop_rest() || closing_) return false;
  took_from_socket(rest + tail.after_read());
  received_ += rest + tail.after_read();
  // What came after the payload is the start of the next request.
  if (input_.size() < sizeof next) input_.resize(kReadChunk);
  std::memcpy(input_.data(), &next, tail.after_read());
  consumed_ = 0;
  filled_ = tail.after_read();
  last_read_short_ = false;  // a stream's
  landed = true;
  return output_.size() - written_ < kEagerFlush || flush();
}

bool InboundConnection::on_readable(bool answer_now, bool consume_later) {
  for (int reads = 0; reads < kReadsPerEvent && wants_read(); ++reads) {
    // A peek sees the socket from its first byte: what an earlier one copied goes first.
    if (!consume_peeked()) return false;
    if (!discard_refused_payload()) return false;
    if (discard_ > 0) break;  // the rest of a refused payload has not come yet
    // Only the loop's thread: an application's poll is on a ping-pong's path, where a payload
    // is still arriving when its header is read, and waiting for all of it costs time.
    bool landed = false;
    if (!consume_later && !land_waiting_payload(landed)) return false;
    if (landed) continue;
    // Room for more of a large message at once, else a chunk; the buffer grows only with
    // bytes that arrive, whatever length a header claims.
    // A connection that has not proven itself holds little (kUnprovenInput at most, see
    // execute_complete), and none for long.
    size_t want = proven_ ? kReadChunk : sizeof(Hello) + sizeof(Request) + kShortRead;
    const size_t have = filled_ - consumed_;
    if (hello_done_ && have >= sizeof(Request)) {
      Request h;
      std::memcpy(&h, input_.data() + consumed_, sizeof h);
      if (valid(h) && sizeof h + h.payload_len > have)
        want = std::clamp(sizeof h + h.payload_len - have, kReadChunk, kLargeRead);
    }
    if (input_.size() < filled_ + want) input_.resize(filled_ + want);
    const bool peek = consume_later && last_read_short_ && last_request_both_ways_ && hello_done_;
    if (peek) want = kShortRead;  // consume_peeked() discards at most that much
    const ssize_t r = recv_now(fd_, input_.data() + filled_, want, peek ? MSG_PEEK : 0);
    if (r == 0) return false;
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      break;  // all read: answer what was executed
    }
    filled_ += static_cast<size_t>(r);
    received_ += static_cast<uint64_t>(r);
    if (!peek) took_from_socket(static_cast<size_t>(r));
    if (peek) peeked_ = static_cast<size_t>(r);
    last_read_short_ = static_cast<size_t>(r) < kShortRead;
    if (!execute_complete()) return false;
    // A short read took all there was: asking again would only hear EAGAIN (a system call
    // on every request's path); what arrives later wakes the loop again.
    if (static_cast<size_t>(r) < want) break;
  }
  return !answer_now || on_writable();
}

bool InboundConnection::has_complete_request() const {
  if (!hello_done_) return filled_ - consumed_ >= sizeof(Hello);
  const size_t have = filled_ - consumed_;
  if (have < sizeof(Request)) return false;
  Request h;
  std::memcpy(&h, input_.data() + consumed_, sizeof h);
  return !valid(h) || have >= sizeof h + h.payload_len;  // a malformed one is "complete" too
}

bool InboundConnection::execute_complete() {
  if (!hello_done_ && !take_hello()) return false;
  while (hello_done_ && discard_ == 0 && filled_ - consumed_ >= sizeof(Request) && wants_read()) {
    Request h;
    std::memcpy(&h, input_.data() + consumed_, sizeof h);
    if (!valid(h)) {
      SOFTRDMA_DEBUG_LOG("malformed request from a peer: connection closed");
      return false;
    }
    const size_t have = filled_ - consumed_;
    if (have < sizeof h + h.payload_len) {
      // Held only for the peer, or for a request that would be taken: one refused whatever
      // its payload is refused now, and its payload dropped as it comes.
      const std::optional<Counter> refusal = !proven_ && sizeof h + h.payload_len > kUnprovenInput
                                                 ? refusal_while_unproven(h)
                                                 : std::nullopt;
      if (!refusal) break;
      refuse(h, *refusal);
      discard_ = sizeof h + h.payload_len - have;
      consumed_ = filled_;
      break;
    }
    if (lands_in_place(h)) add_unlocked(large_total, 1);
    execute(h, input_.data() + consumed_ + sizeof h, h.payload_len);
    consumed_ += sizeof h + h.payload_len;
    if (closing_) {
      flush();  // what can go out of the last answers
      return false;
    }
    if (output_.size() - written_ >= kEagerFlush && !flush()) return false;
  }
  // Keep the unconsumed bytes at the front; the buffer keeps its size for the next reads.
  if (consumed_ > 0) {
    std::memmove(input_.data(), input_.data() + consumed_, filled_ - consumed_);
    filled_ -= consumed_;
    consumed_ = 0;
  }
  return true;
}

void InboundConnection::execute(const Request& h, const char* payload, size_t buffered,
                                PayloadTail* tail) {
  Response resp{};
  resp.magic = kMagic;
  resp.kind = Kind::kResponse;
  resp.src_qpn = h.src_qpn;
  resp.psn = h.psn;
  const bool rc = h.qp_type == IBV_QPT_RC;  // carries acknowledgements for its peer's requests
  const bool connected = h.qp_type != IBV_QPT_UD;
  last_request_both_ways_ = ack_may_ride_back(h);
  const bool found = resolve_target(h.dest_qpn);
  TargetQp& target = target_;
  const PeerCheck check =
      found && connected ? check_peer(*target.qp, peer_, h.src_qpn) : PeerCheck::kFirstProof;
  // Acknowledgements the peer's QP carries for our QP come first, as on the wire; only from
  // the peer (a first request of a link, once it proved itself below).
  const bool acks = rc && psn::end_known(h.acked_psn_end);
  if (acks && check == PeerCheck::kPeer)
    apply_implied_acks(h.dest_qpn, h.acked_psn_end & psn::kMask);
  if (h.flags & kCarriesDatagramAck)
    apply_datagram_ack(h.dest_qpn, peer_.gid, h.src_qpn, h.acked_psn_end);
  iovec local{};
  uint64_t result_len = 0;
  if (carries_payload(h.opcode)) {
    local = iovec{const_cast<char*>(payload), buffered};
  } else {
    result_len = h.opcode == IBV_WR_RDMA_READ ? h.length : sizeof(uint64_t);
    result_.resize(result_len);
    local = iovec{result_.data(), result_.size()};
  }
  InboundRequest request = to_inbound(h, &local, local.iov_len ? 1 : 0);
  request.tail = tail;
  // A datagram's source is the host it came from, whatever it claims.
  if (connected)
    request.from = &peer_;
  else
    std::memcpy(request.src_gid, peer_.gid, sizeof request.src_gid);
  // A QP that is not here gives no answer, as behind a NIC.
  std::optional<ResponderReply> reply = ResponderReply{ResponderReply::Kind::kNoAnswer};
  // A datagram the target QP sends this requester next carries the acknowledgement: noted
  // before the datagram lands, or the QP's owner, polling, could reply before the note.
  if (found && !connected)
    target.qp->datagram_peer_ack.store(datagram_ack(h.src_qpn, host_tag(peer_.gid), h.psn),
                                       std::memory_order_release);
  if (!found || check == PeerCheck::kForeign) {
    count(Counter::kForeignRequests);
    note_refused();
    if (found) {
      char from[INET_ADDRSTRLEN] = "?";
      inet_ntop(AF_INET, peer_.gid + 12, from, sizeof from);
      SOFTRDMA_NOTICE(
          "refused a request to QP %u from %s claiming to be QP %u: not its connected peer",
          h.dest_qpn, from, h.src_qpn);
    }
  } else {
    reply = is_reliable(static_cast<ibv_qp_type>(h.qp_type))
                ? respond_in_sequence(target, h.psn, request)
                : respond(target, request);
    if (!connected) {
      if (h.qkey == target.qp->qkey) proven_ = true;
    } else if (check == PeerCheck::kPeer) {
      proven_ = true;
    } else if (check_peer(*target.qp, peer_, h.src_qpn) == PeerCheck::kPeer) {
      proven_ = true;
      // The first request that proved the QP's peer: what it acknowledges applies now.
      if (acks && check == PeerCheck::kFirstProof)
        apply_implied_acks(h.dest_qpn, h.acked_psn_end & psn::kMask);
    } else {
      note_refused();
    }
  }
  if (reply && reply->kind == ResponderReply::Kind::kDone &&
      reply->status == IBV_WC_REM_ACCESS_ERR) {
    count(Counter::kRemoteAccessErrors);
    if (peer_penalties().note_access_error(peer_, Clock::now())) {
      count(Counter::kPeersRefused);
      closing_ = true;  // answered, then closed: the peer is refused for a while
      SOFTRDMA_NOTICE("a peer caused %u remote access errors within %lld s: refused for %lld s",
                      PeerPenalties::kMostAccessErrors,
                      static_cast<long long>(PeerPenalties::kWindow.count()),
                      static_cast<long long>(PeerPenalties::kRefusedFor.count()));
    }
  }
  if (!reply) {
    resp.reply = Reply::kOutOfSequence;
  } else {
    resp.reply = to_reply(reply->kind);
    resp.status = reply->status;
    resp.rnr_timer = reply->rnr_timer;
    if (rc && reply->kind == ResponderReply::Kind::kDone) advance_peer_psn_end(target.qp, h.psn);
  }
  if (resp.reply != Reply::kDone || resp.status != IBV_WC_SUCCESS) result_len = 0;
  resp.payload_len = result_len;
  if (target.qp && answered_by_bare_ack(h, resp) && ack_may_ride_back(h) && held_.may_hold()) {
    append(output_, &resp, sizeof resp);
    held_.hold(target, h.src_qpn, h.psn);
    return;
  }
  send_held_first();
  append(output_, &resp, sizeof resp);
  append(output_, result_.data(), result_len);
  sendable_end_ = output_.size();
  if (result_len) ++data_answers_;
}

bool InboundConnection::resolve_target(uint32_t qpn) {
  if (target_.qp && target_.qpn == qpn && target_.current()) return true;
  if (resolve_local_qp(qpn, target_)) return true;
  target_ = TargetQp{};
  return false;
}

void InboundConnection::settle_held(HeldAcks::Clock::time_point now, bool all) {
  const auto kept = held_.release(output_.data() + sendable_end_, now, all);
  output_.resize(sendable_end_ + kept.remaining * sizeof(Response));
  if (!kept.still_held) sendable_end_ = output_.size();
}

void InboundConnection::send_held_first() {
  if (!held_.empty()) settle_held(HeldAcks::Clock::now(), true);
}

bool InboundConnection::release_held(HeldAcks::Clock::time_point now, bool all) {
  if (held_.empty()) return true;
  settle_held(now, all);
  return on_writable();
}

bool InboundConnection::on_writable() {
  // Requests read earlier may wait behind the output limit, with nothing more to come on the
  // socket to wake the loop for them: run them as soon as answers drain. Each round executes
  // at least one request, so the loop ends with the buffered input.
  for (;;) {
    if (!flush()) return false;
    if (!wants_read() || !has_complete_request()) return true;
    if (!execute_complete()) return false;
  }
}

bool InboundConnection::flush() {
  while (wants_write()) {
    const iovec unsent{output_.data() + written_, sendable_end_ - written_};
    const ssize_t w = write_now(fd_, &unsent, 1);
    if (w < 0) return false;
    if (w == 0) break;  // the socket is full
    written_ += static_cast<size_t>(w);
  }
  // Reclaim what was sent: at once when all of it was, else once the sent part is large.
  if (written_ == sendable_end_ || written_ >= kMaxPendingOutput) {
    output_.erase(output_.begin(), output_.begin() + static_cast<ptrdiff_t>(written_));
    sendable_end_ -= written_;
    written_ = 0;
  }
  return true;
}

}  // namespace softrdma::wire

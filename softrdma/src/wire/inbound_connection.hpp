// One inbound TCP connection of the responder: a stream of requests from one host's
// softrdma processes, read without blocking, executed in order, answered in order. It opens
// with each end's hello (wire/hello.hpp); every request is checked against its QP's peer
// (engine/connected_peer.hpp). Its buffers are bounded: reading pauses while answers the
// peer has not taken pile up, and a connection that has not proven itself holds little.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/connected_peer.hpp"
#include "engine/device_counters.hpp"
#include "engine/responder.hpp"
#include "wire/held_acks.hpp"
#include "wire/protocol.hpp"

namespace softrdma::wire {

/// A request received from the wire (`h`, its payload or result buffers in `local`), as the
/// responder takes it.
InboundRequest to_inbound(const Request& h, const iovec* local, int count);

class InboundConnection {
 public:
  using Clock = std::chrono::steady_clock;
  /// Answers waiting for the peer to read them, above which reading pauses.
  static constexpr size_t kMaxPendingOutput = size_t{8} << 20;

  /// Takes ownership of the non-blocking socket `fd`.
  explicit InboundConnection(int fd);
  ~InboundConnection();
  InboundConnection(const InboundConnection&) = delete;
  InboundConnection& operator=(const InboundConnection&) = delete;

  int fd() const { return fd_; }
  /// Reads what arrived and executes every complete request, and unless `answer_now` is
  /// false hands the answers to the socket (then on_writable() does). With
  /// `consume_later`, the bytes of its last read stay in the socket until the next call
  /// (see peeked_). False: close the connection (the peer closed it, or sent something
  /// malformed).
  bool on_readable(bool answer_now = true, bool consume_later = false);
  /// Writes pending answers, then executes requests that waited for them to drain. False:
  /// close the connection.
  bool on_writable();
  /// Takes the bytes a peek left in the socket out of it. Done before the socket closes:
  /// closing a socket with unread bytes resets the connection, and answers still queued in
  /// it are lost. False: the connection failed.
  bool consume_peeked();
  /// Answers are waiting for the socket to take them (held acknowledgements aside).
  bool wants_write() const { return written_ < sendable_end_; }
  /// Bare acknowledgements are held (wire/held_acks.hpp), due at held_due().
  bool holds_acks() const { return !held_.empty(); }
  HeldAcks::Clock::time_point held_due() const { return held_.due(); }
  /// Drops the held acknowledgements a request of their QP carried since, and hands the
  /// others to the socket once due at `now`, or at once with `all`. False: close the
  /// connection.
  bool release_held(HeldAcks::Clock::time_point now, bool all);
  /// Reading pauses while too many answers wait (a peer that does not read its answers).
  bool wants_read() const { return output_.size() - written_ < kMaxPendingOutput; }
  /// Bytes read from the socket so far.
  uint64_t received() const { return received_; }
  /// READs and atomics answered with their data so far: their requesters wait for it.
  uint64_t data_answers() const { return data_answers_; }
  /// Of this process's requests with a payload large enough to land in place (SEND, WRITE),
  /// how many did so and how many there were (logged at exit under SOFTRDMA_DEBUG).
  struct LandingTotals {
    uint64_t landed;
    uint64_t large;
  };
  static LandingTotals landing_totals();
  /// The peer has proven itself: a request of it reached a QP as from that QP's peer (its
  /// host, QP number and identity), or a datagram a QP with its qkey.
  bool proven() const { return proven_; }
  Clock::time_point accepted_at() const { return accepted_at_; }
  /// Input held for a connection that has not proven itself, beyond which a request is
  /// refused at once if it would be anyway, and its payload dropped as it comes.
  static constexpr size_t kUnprovenInput = size_t{64} << 10;
  /// Requests refused before the connection proved itself, after which it is closed.
  static constexpr uint32_t kMostRefusedUnproven = 64;

 private:
  /// Executes every complete request read so far. False on a malformed one.
  bool execute_complete();
  /// A whole request (or a malformed header) waits in input_.
  bool has_complete_request() const;
  /// Hands pending answers to the socket without blocking. False: the connection failed.
  bool flush();
  /// Executes one request and appends its answer to output_. The first `buffered` bytes of
  /// its payload are at `payload`, the rest (if any) is `tail`, still in the socket.
  void execute(const Request& h, const char* payload, size_t buffered, PayloadTail* tail = nullptr);
  /// Answers `h` as not taken (kNoAnswer), counting `why`, without looking at its payload.
  void refuse(const Request& h, Counter why);
  /// Takes the peer's hello if it has come whole (hello_done_ then). False: close.
  bool take_hello();
  /// Whether a request of this connection, which has not proven itself yet, would be taken;
  /// else what refuses it.
  std::optional<Counter> refusal_while_unproven(const Request& h);
  /// Notes a request refused while the connection has not proven itself.
  void note_refused();
  /// Drops what remains in the socket of a refused request's payload. False: close.
  bool discard_refused_payload();
  /// Runs the request whose header was read last if its payload is a large one and waits
  /// whole in the socket: the payload is read straight into its destination (`landed`).
  /// False: close the connection.
  bool land_waiting_payload(bool& landed);

  int fd_;
  Clock::time_point accepted_at_;
  ConnectionPeer peer_{};  // its host from the socket, its identity from its hello
  uint32_t own_ipv4_be_ = 0;
  bool hello_done_ = false;
  bool proven_ = false;
  bool closing_ = false;     // refused too often, or a peer refused for a while: close it
  uint32_t refused_ = 0;     // requests refused before it proved itself
  size_t discard_ = 0;       // bytes of a refused request's payload still in the socket
  std::vector<char> input_;  // [consumed_, filled_): read, not yet executed
  size_t consumed_ = 0;
  size_t filled_ = 0;
  uint64_t received_ = 0;
  uint64_t data_answers_ = 0;
  // Bytes copied into input_ by a peek and still in the socket. Taking bytes that empty the
  // socket makes the kernel send an acknowledgement at once (the connection carries nothing
  // back for it to ride on), inside that call: on a polling application's path from a
  // request to what it does about it. Peeked, they leave the socket at the next read,
  // after the application acted.
  size_t peeked_ = 0;
  // Only where an answer is coming: the last read was short (a message or a few, not a
  // stream's) and its last request came from a QP whose traffic flows both ways
  // (kTakesCarriedAcks). A one-way stream's sender needs the acknowledgements to go on.
  bool last_read_short_ = true;
  bool last_request_both_ways_ = false;
  // Bytes known to wait in the socket: at least this many, as the kernel last said, less
  // what was taken since. Spares asking it for every payload of a backlog.
  size_t known_waiting_ = 0;
  // received_ when the kernel was last asked how much waits.
  uint64_t asked_at_ = UINT64_MAX;
  void took_from_socket(size_t n) { known_waiting_ -= std::min(known_waiting_, n); }
  /// Drops the held acknowledgements that were carried; makes the others sendable once due
  /// at `now`, or with `all`.
  void settle_held(HeldAcks::Clock::time_point now, bool all);
  /// Stops holding acknowledgements: they go out before what is appended next.
  void send_held_first();

  std::vector<char> output_;  // answers; the first written_ bytes are sent
  size_t written_ = 0;
  size_t sendable_end_ = 0;  // output_ from here on is held acknowledgements
  HeldAcks held_;
  std::vector<char> result_;  // READ data or an atomic's original value
  // The QP the last request went to, kept while it lives: a stream of requests to one QP
  // resolves it once (resolve_local_qp takes a process-wide lock and a map lookup).
  TargetQp target_;
  /// Points target_ at QP `qpn` of this host; false (target_ empty) if there is none.
  bool resolve_target(uint32_t qpn);
};

}  // namespace softrdma::wire

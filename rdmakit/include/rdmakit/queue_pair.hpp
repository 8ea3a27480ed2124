// Queue pairs (RC and UD), their builder, shared receive queues and address handles.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <system_error>

#include "rdmakit/completion_queue.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/memory_region.hpp"

struct rdma_cm_id;

namespace rdmakit {

/// The transport of a QP: reliable connected, or unreliable datagram.
enum class QpType { rc, ud };

/// The sizes a QP was created with (after clamping to the device's limits).
struct QpCaps {
  /// Work requests the send queue holds.
  uint32_t send_depth = 128;
  /// Receives the receive queue holds (unused with an SRQ).
  uint32_t recv_depth = 128;
  /// Scatter/gather entries per send work request.
  uint32_t send_sge = 1;
  /// Scatter/gather entries per receive.
  uint32_t recv_sge = 1;
  /// Bytes a send may carry inline, copied at post time.
  uint32_t inline_size = 64;
  uint8_t rd_atomic = 16;  ///< outstanding READs/atomics, both as initiator and as responder
};

/// Transport timers of an RC QP (IBTA encodings, see ibv_modify_qp(3)).
struct QpTimers {
  uint8_t timeout = 14;  ///< 4.096 us * 2^timeout per attempt
  /// Retransmissions before IBV_WC_RETRY_EXC_ERR.
  uint8_t retry_count = 7;
  uint8_t rnr_retry = 7;       ///< 7: retry forever
  uint8_t min_rnr_timer = 12;  ///< 0.64 ms
};

/// What a peer needs to reach a QP.
struct QpAddress {
  /// QP number.
  uint32_t qpn = 0;
  /// Packet sequence number the peer's requests start from.
  uint32_t psn = 0;
  /// GID of the port (RoCE: needed on every path).
  ibv_gid gid{};
  /// LID of the port (InfiniBand; 0 on RoCE).
  uint16_t lid = 0;
  uint32_t qkey = 0;  ///< UD only
};

/// How two connected QPs talk, as negotiated by a handshake (or chosen by the caller).
struct PathParams {
  /// Path MTU: the smaller of both sides' active MTUs.
  ibv_mtu mtu = IBV_MTU_1024;
  uint8_t initiator_depth = 1;  ///< READs/atomics we may have outstanding at the peer
  uint8_t responder_depth = 1;  ///< READs/atomics the peer may have outstanding at us
};

class SharedReceiveQueue;
namespace detail {
struct CmQueuePairs;
}

/// A queue pair (RC or UD) made by QpBuilder; move-only, keeps its PD, CQs and SRQ
/// alive. The data-path calls never throw.
class QueuePair {
 public:
  /// An empty QueuePair (no QP), e.g. to be assigned later.
  QueuePair() = default;
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;
  /// Takes over `other`'s QP; `other` becomes empty.
  QueuePair(QueuePair&& other) noexcept;
  /// Destroys this QP, then takes over `other`'s.
  QueuePair& operator=(QueuePair&& other) noexcept;
  /// Destroys the QP (through the RDMA CM when it made it).
  ~QueuePair();

  /// The verbs QP, for calls rdmakit does not wrap. Must not be empty.
  ibv_qp* get() const;
  /// The QP number.
  uint32_t qpn() const { return get()->qp_num; }
  /// RC or UD.
  QpType type() const noexcept { return type_; }
  /// The sizes the device granted.
  const QpCaps& caps() const noexcept { return caps_; }
  /// The transport timers connect() applies.
  const QpTimers& timers() const noexcept { return timers_; }
  /// This QP as its peer must address it.
  QpAddress address() const;
  /// True once connect() (RC) or activate() (UD) succeeded.
  bool ready() const noexcept { return ready_; }

  /// RC: RESET -> INIT -> RTR -> RTS towards `peer`. Throws Error naming the transition.
  void connect(const QpAddress& peer, const PathParams& path);
  /// As connect(), reporting a failure in `ec` instead of throwing.
  void connect(const QpAddress& peer, const PathParams& path, std::error_code& ec);
  /// UD: RESET -> INIT -> RTR -> RTS. Throws Error naming the transition.
  void activate();
  /// Moves the QP to ERROR: outstanding work requests complete with IBV_WC_WR_FLUSH_ERR.
  std::error_code to_error() noexcept;
  /// The QP's state as the device reports it (ibv_query_qp).
  ibv_qp_state state() const;

  /// Posts a chain of work requests with one doorbell. Posting before connect()/activate() is
  /// a programming error. Returns the verbs error (e.g. ENOMEM when the queue is full).
  std::error_code post_send(ibv_send_wr& first) noexcept {
    RDMAKIT_REQUIRE(ready_, "post_send on a queue pair that is not connected");
    ibv_send_wr* bad = nullptr;
    if (int err = ibv_post_send(raw_, &first, &bad)) return verbs_error(err);
    return {};
  }
  /// Posts a chain of receives; the verbs error on failure (e.g. ENOMEM when full).
  std::error_code post_recv(ibv_recv_wr& first) noexcept {
    RDMAKIT_REQUIRE(raw_ != nullptr, "post_recv on a moved-from queue pair");
    ibv_recv_wr* bad = nullptr;
    if (int err = ibv_post_recv(raw_, &first, &bad)) return verbs_error(err);
    return {};
  }

 private:
  friend class QpBuilder;
  friend struct detail::CmQueuePairs;
  std::string describe() const;
  void destroy() noexcept;
  std::error_code modify(ibv_qp_attr& attr, int mask, const char* transition, std::string& what);

  ibv_qp* raw_ = nullptr;
  QpType type_ = QpType::rc;
  QpCaps caps_;
  QpTimers timers_;
  uint8_t port_ = 1;
  int gid_index_ = 0;
  ibv_gid gid_{};
  uint16_t lid_ = 0;
  uint32_t psn_ = 0;
  uint32_t qkey_ = 0;
  bool ready_ = false;
  rdma_cm_id* cm_id_ = nullptr;       ///< created by rdma_create_qp: destroyed by rdma_destroy_qp
  std::shared_ptr<void> keep_alive_;  ///< PD, CQs and SRQ outlive the QP
};

/// Builds a QP with named settings. Defaults are clamped to what the device reports, so
/// QpBuilder(ctx, pd, cq).build() works on any device.
class QpBuilder {
 public:
  /// A builder for a QP in `pd` whose sends and receives complete on `cq`.
  QpBuilder(const Context& context, const ProtectionDomain& pd, const CompletionQueue& cq);

  /// RC (default) or UD.
  QpBuilder& type(QpType t) {
    type_ = t;
    return *this;
  }
  /// A separate CQ for send completions.
  QpBuilder& send_cq(const CompletionQueue& cq) {
    send_cq_ = cq.handle();
    return *this;
  }
  /// A separate CQ for receive completions.
  QpBuilder& recv_cq(const CompletionQueue& cq) {
    recv_cq_ = cq.handle();
    return *this;
  }
  /// Receives come from `srq` instead of the QP's own receive queue.
  QpBuilder& srq(const SharedReceiveQueue& srq);
  /// Send queue depth (QpCaps::send_depth).
  QpBuilder& send_depth(uint32_t n) {
    caps_.send_depth = n;
    return *this;
  }
  /// Receive queue depth (QpCaps::recv_depth).
  QpBuilder& recv_depth(uint32_t n) {
    caps_.recv_depth = n;
    return *this;
  }
  /// Scatter/gather entries per send (QpCaps::send_sge).
  QpBuilder& send_sge(uint32_t n) {
    caps_.send_sge = n;
    return *this;
  }
  /// Scatter/gather entries per receive (QpCaps::recv_sge).
  QpBuilder& recv_sge(uint32_t n) {
    caps_.recv_sge = n;
    return *this;
  }
  /// Inline bytes per send (QpCaps::inline_size).
  QpBuilder& inline_size(uint32_t n) {
    caps_.inline_size = n;
    return *this;
  }
  /// READs/atomics outstanding in each direction (QpCaps::rd_atomic).
  QpBuilder& rd_atomic(uint8_t n) {
    caps_.rd_atomic = n;
    return *this;
  }
  /// ACK timeout exponent (QpTimers::timeout).
  QpBuilder& timeout(uint8_t t) {
    timers_.timeout = t;
    return *this;
  }
  /// Retransmissions (QpTimers::retry_count).
  QpBuilder& retry_count(uint8_t n) {
    timers_.retry_count = n;
    return *this;
  }
  /// Receiver-not-ready retries (QpTimers::rnr_retry).
  QpBuilder& rnr_retry(uint8_t n) {
    timers_.rnr_retry = n;
    return *this;
  }
  /// RNR NAK delay this QP asks of its peers (QpTimers::min_rnr_timer).
  QpBuilder& min_rnr_timer(uint8_t t) {
    timers_.min_rnr_timer = t;
    return *this;
  }
  /// UD: the Q_Key the QP accepts and sends with.
  QpBuilder& qkey(uint32_t q) {
    qkey_ = q;
    return *this;
  }

  /// The sizes build() requests: the settings clamped to the device's limits.
  QpCaps clamped_caps() const;
  /// Creates the QP (in RESET). Throws Error naming the QP's settings on failure.
  QueuePair build() const;
  /// Creates the QP of an RDMA CM id (rdma_create_qp): the CM moves it through its states.
  QueuePair build(rdma_cm_id* id) const;

 private:
  ibv_qp_init_attr init_attr(const QpCaps& caps) const;
  QueuePair wrap(ibv_qp* qp, QpCaps caps, const ibv_qp_init_attr& granted) const;
  const Context* context_;
  std::shared_ptr<ibv_pd> pd_;
  std::shared_ptr<ibv_cq> send_cq_, recv_cq_;
  std::shared_ptr<ibv_srq> srq_;
  QpType type_ = QpType::rc;
  QpCaps caps_;
  QpTimers timers_;
  uint32_t qkey_ = 0x11111111;
};

/// A shared receive queue: one pool of receives for many QPs; move-only.
class SharedReceiveQueue {
 public:
  /// `depth` and `sge` are clamped to the device's limits. Throws Error on failure.
  SharedReceiveQueue(const Context& context, const ProtectionDomain& pd, uint32_t depth,
                     uint32_t sge = 1);
  SharedReceiveQueue(const SharedReceiveQueue&) = delete;
  SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;
  /// Takes over the SRQ; the source becomes empty.
  SharedReceiveQueue(SharedReceiveQueue&&) noexcept = default;
  /// Releases this SRQ, then takes over the other's.
  SharedReceiveQueue& operator=(SharedReceiveQueue&&) noexcept = default;

  /// The verbs SRQ.
  ibv_srq* get() const;
  /// Receives it holds (after clamping).
  uint32_t depth() const noexcept { return depth_; }
  /// Posts a chain of receives; the verbs error on failure.
  std::error_code post_recv(ibv_recv_wr& first) noexcept {
    ibv_recv_wr* bad = nullptr;
    if (int err = ibv_post_srq_recv(get(), &first, &bad)) return verbs_error(err);
    return {};
  }
  /// Arms the limit event: IBV_EVENT_SRQ_LIMIT_REACHED when fewer than `limit` receives remain.
  void set_limit(uint32_t limit) const;
  /// Shared ownership of the SRQ, for objects that must keep it alive.
  const std::shared_ptr<ibv_srq>& handle() const;

 private:
  std::shared_ptr<ibv_srq> srq_;
  uint32_t depth_ = 0;
};

/// Where a UD send goes.
class AddressHandle {
 public:
  /// An address handle towards `peer` (its GID, QP number and Q_Key). Throws Error.
  AddressHandle(const Context& context, const ProtectionDomain& pd, const QpAddress& peer);
  /// The verbs address handle, for ibv_send_wr::wr.ud.ah.
  ibv_ah* get() const;
  /// The peer's QP number, for ibv_send_wr::wr.ud.remote_qpn.
  uint32_t remote_qpn() const noexcept { return qpn_; }
  /// The peer's Q_Key, for ibv_send_wr::wr.ud.remote_qkey.
  uint32_t remote_qkey() const noexcept { return qkey_; }

 private:
  std::shared_ptr<ibv_ah> ah_;
  uint32_t qpn_ = 0;
  uint32_t qkey_ = 0;
};

}  // namespace rdmakit

#include "rdmakit/queue_pair.hpp"

#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstdio>
#include <random>

#include "rdmakit/error.hpp"

namespace rdmakit {
namespace {

// Packet sequence numbers are 24 bits.
constexpr uint32_t kPsnMask = 0xffffff;

uint32_t random_psn() {
  static thread_local std::minstd_rand rng{std::random_device{}()};
  return static_cast<uint32_t>(rng()) & kPsnMask;
}

template <typename T>
T clamp_to(T wanted, int limit) {
  return limit > 0 && wanted > static_cast<T>(limit) ? static_cast<T>(limit) : wanted;
}

}  // namespace

QueuePair::QueuePair(QueuePair&& other) noexcept {
  *this = std::move(other);
}

QueuePair& QueuePair::operator=(QueuePair&& other) noexcept {
  if (this == &other) return *this;
  destroy();
  raw_ = std::exchange(other.raw_, nullptr);
  cm_id_ = std::exchange(other.cm_id_, nullptr);
  type_ = other.type_;
  caps_ = other.caps_;
  timers_ = other.timers_;
  port_ = other.port_;
  gid_index_ = other.gid_index_;
  gid_ = other.gid_;
  lid_ = other.lid_;
  psn_ = other.psn_;
  qkey_ = other.qkey_;
  ready_ = std::exchange(other.ready_, false);
  keep_alive_ = std::move(other.keep_alive_);
  return *this;
}

QueuePair::~QueuePair() {
  destroy();
}

void QueuePair::destroy() noexcept {
  if (cm_id_)
    rdma_destroy_qp(cm_id_);
  else if (raw_)
    ibv_destroy_qp(raw_);
  raw_ = nullptr;
  cm_id_ = nullptr;
}

ibv_qp* QueuePair::get() const {
  RDMAKIT_REQUIRE(raw_ != nullptr, "use of an empty or moved-from rdmakit::QueuePair");
  return raw_;
}

std::string QueuePair::describe() const {
  char text[48];
  std::snprintf(text, sizeof text, "%s QP 0x%x", type_ == QpType::rc ? "RC" : "UD",
                raw_ ? raw_->qp_num : 0);
  return text;
}

QpAddress QueuePair::address() const {
  return QpAddress{qpn(), psn_, gid_, lid_, qkey_};
}

std::error_code QueuePair::modify(ibv_qp_attr& attr, int mask, const char* transition,
                                  std::string& what) {
  if (int err = ibv_modify_qp(get(), &attr, mask)) {
    what = std::string("ibv_modify_qp(") + transition + ")";
    return verbs_error(err);
  }
  return {};
}

void QueuePair::connect(const QpAddress& peer, const PathParams& path, std::error_code& ec) {
  RDMAKIT_REQUIRE(type_ == QpType::rc, "QueuePair::connect on a UD QP (use activate)");
  RDMAKIT_REQUIRE(!ready_, "QueuePair::connect on a QP that is already connected");
  std::string what;
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.port_num = port_;
  init.qp_access_flags =
      IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if ((ec = modify(init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                   "INIT", what)))
    return;
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = path.mtu;
  rtr.dest_qp_num = peer.qpn;
  rtr.rq_psn = peer.psn;
  rtr.max_dest_rd_atomic = path.responder_depth;
  rtr.min_rnr_timer = timers_.min_rnr_timer;
  rtr.ah_attr.port_num = port_;
  rtr.ah_attr.dlid = peer.lid;
  rtr.ah_attr.is_global = 1;
  rtr.ah_attr.grh.dgid = peer.gid;
  rtr.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index_);
  rtr.ah_attr.grh.hop_limit = 64;
  if ((ec = modify(rtr,
                   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                   "RTR", what)))
    return;
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.sq_psn = psn_;
  rts.timeout = timers_.timeout;
  rts.retry_cnt = timers_.retry_count;
  rts.rnr_retry = timers_.rnr_retry;
  rts.max_rd_atomic = path.initiator_depth;
  if ((ec = modify(rts,
                   IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
                   "RTS", what)))
    return;
  ready_ = true;
}

void QueuePair::connect(const QpAddress& peer, const PathParams& path) {
  std::error_code ec;
  connect(peer, path, ec);
  if (ec) throw_verbs_error("connecting (RESET->INIT->RTR->RTS)", ec.value(), describe());
}

void QueuePair::activate() {
  RDMAKIT_REQUIRE(type_ == QpType::ud, "QueuePair::activate on an RC QP (use connect)");
  std::string what;
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.port_num = port_;
  init.qkey = qkey_;
  std::error_code ec =
      modify(init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, "INIT", what);
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  if (!ec) ec = modify(rtr, IBV_QP_STATE, "RTR", what);
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.sq_psn = psn_;
  if (!ec) ec = modify(rts, IBV_QP_STATE | IBV_QP_SQ_PSN, "RTS", what);
  if (ec) throw_verbs_error(what, ec.value(), describe());
  ready_ = true;
}

std::error_code QueuePair::to_error() noexcept {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  if (int err = ibv_modify_qp(get(), &attr, IBV_QP_STATE)) return verbs_error(err);
  return {};
}

ibv_qp_state QueuePair::state() const {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (int err = ibv_query_qp(get(), &attr, IBV_QP_STATE, &init))
    throw_verbs_error("ibv_query_qp", err, describe());
  return attr.qp_state;
}

QpBuilder::QpBuilder(const Context& context, const ProtectionDomain& pd, const CompletionQueue& cq)
    : context_(&context), pd_(pd.handle()), send_cq_(cq.handle()), recv_cq_(cq.handle()) {}

QpBuilder& QpBuilder::srq(const SharedReceiveQueue& srq) {
  srq_ = srq.handle();
  return *this;
}

QpCaps QpBuilder::clamped_caps() const {
  const ibv_device_attr& attr = context_->attributes();
  QpCaps caps = caps_;
  caps.send_depth = clamp_to(caps.send_depth, attr.max_qp_wr);
  caps.recv_depth = srq_ ? 0 : clamp_to(caps.recv_depth, attr.max_qp_wr);
  caps.send_sge = clamp_to(caps.send_sge, attr.max_sge);
  caps.recv_sge = srq_ ? 0 : clamp_to(caps.recv_sge, attr.max_sge);
  caps.rd_atomic =
      clamp_to(caps.rd_atomic, std::min(attr.max_qp_rd_atom, attr.max_qp_init_rd_atom));
  if (type_ == QpType::ud) caps.rd_atomic = 0;
  return caps;
}

ibv_qp_init_attr QpBuilder::init_attr(const QpCaps& caps) const {
  ibv_qp_init_attr init{};
  init.send_cq = send_cq_.get();
  init.recv_cq = recv_cq_.get();
  init.srq = srq_.get();
  init.qp_type = type_ == QpType::rc ? IBV_QPT_RC : IBV_QPT_UD;
  init.cap.max_send_wr = caps.send_depth;
  init.cap.max_recv_wr = caps.recv_depth;
  init.cap.max_send_sge = caps.send_sge;
  init.cap.max_recv_sge = caps.recv_sge;
  init.cap.max_inline_data = caps.inline_size;
  return init;
}

QueuePair QpBuilder::wrap(ibv_qp* qp, QpCaps caps, const ibv_qp_init_attr& granted) const {
  if (!qp) {
    char object[160];
    std::snprintf(object, sizeof object,
                  "%s QP (send %u x %u SGE, recv %u x %u SGE, inline %u) on %s",
                  type_ == QpType::rc ? "RC" : "UD", caps.send_depth, caps.send_sge,
                  caps.recv_depth, caps.recv_sge, caps.inline_size, context_->name().c_str());
    throw_verbs_error("ibv_create_qp", errno, object);
  }
  // The device may round sizes up: record what it granted.
  caps.send_depth = granted.cap.max_send_wr;
  caps.recv_depth = granted.cap.max_recv_wr;
  caps.inline_size = granted.cap.max_inline_data;
  QueuePair result;
  result.raw_ = qp;
  result.type_ = type_;
  result.caps_ = caps;
  result.timers_ = timers_;
  result.port_ = context_->port();
  result.gid_index_ = context_->gid().entry.index;
  result.gid_ = context_->gid().entry.gid;
  result.lid_ = context_->port_info().lid;
  result.psn_ = random_psn();
  result.qkey_ = qkey_;
  struct Parents {
    std::shared_ptr<ibv_pd> pd;
    std::shared_ptr<ibv_cq> send_cq, recv_cq;
    std::shared_ptr<ibv_srq> srq;
  };
  result.keep_alive_ = std::make_shared<Parents>(Parents{pd_, send_cq_, recv_cq_, srq_});
  return result;
}

QueuePair QpBuilder::build() const {
  const QpCaps caps = clamped_caps();
  ibv_qp_init_attr init = init_attr(caps);
  ibv_qp* qp = ibv_create_qp(pd_.get(), &init);
  if (!qp && errno == EINVAL && caps.inline_size > 0) {
    // Devices report no inline limit in ibv_device_attr: fall back to none.
    init.cap.max_inline_data = 0;
    qp = ibv_create_qp(pd_.get(), &init);
  }
  return wrap(qp, caps, init);
}

QueuePair QpBuilder::build(rdma_cm_id* id) const {
  const QpCaps caps = clamped_caps();
  ibv_qp_init_attr init = init_attr(caps);
  if (rdma_create_qp(id, pd_.get(), &init) != 0) return wrap(nullptr, caps, init);
  QueuePair result = wrap(id->qp, caps, init);
  result.cm_id_ = id;
  return result;
}

SharedReceiveQueue::SharedReceiveQueue(const Context& context, const ProtectionDomain& pd,
                                       uint32_t depth, uint32_t sge) {
  std::shared_ptr<ibv_pd> parent = pd.handle();
  ibv_srq_init_attr init{};
  init.attr.max_wr = clamp_to(depth, context.attributes().max_srq_wr);
  init.attr.max_sge = clamp_to(sge, context.attributes().max_srq_sge);
  ibv_srq* srq = ibv_create_srq(parent.get(), &init);
  if (!srq) throw_verbs_error("ibv_create_srq", errno, context.name());
  depth_ = init.attr.max_wr;
  srq_ = std::shared_ptr<ibv_srq>(srq, [parent](ibv_srq* s) { ibv_destroy_srq(s); });
}

ibv_srq* SharedReceiveQueue::get() const {
  RDMAKIT_REQUIRE(srq_ != nullptr, "use of a moved-from rdmakit::SharedReceiveQueue");
  return srq_.get();
}

const std::shared_ptr<ibv_srq>& SharedReceiveQueue::handle() const {
  get();
  return srq_;
}

void SharedReceiveQueue::set_limit(uint32_t limit) const {
  ibv_srq_attr attr{};
  attr.srq_limit = limit;
  if (int err = ibv_modify_srq(get(), &attr, IBV_SRQ_LIMIT))
    throw_verbs_error("ibv_modify_srq(limit)", err, "shared receive queue");
}

AddressHandle::AddressHandle(const Context& context, const ProtectionDomain& pd,
                             const QpAddress& peer)
    : qpn_(peer.qpn), qkey_(peer.qkey) {
  std::shared_ptr<ibv_pd> parent = pd.handle();
  ibv_ah_attr attr{};
  attr.port_num = context.port();
  attr.dlid = peer.lid;
  attr.is_global = 1;
  attr.grh.dgid = peer.gid;
  attr.grh.sgid_index = static_cast<uint8_t>(context.gid().entry.index);
  attr.grh.hop_limit = 64;
  ibv_ah* ah = ibv_create_ah(parent.get(), &attr);
  if (!ah) throw_verbs_error("ibv_create_ah", errno, context.name());
  ah_ = std::shared_ptr<ibv_ah>(ah, [parent](ibv_ah* a) { ibv_destroy_ah(a); });
}

ibv_ah* AddressHandle::get() const {
  RDMAKIT_REQUIRE(ah_ != nullptr, "use of a moved-from rdmakit::AddressHandle");
  return ah_.get();
}

}  // namespace rdmakit

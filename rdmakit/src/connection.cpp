#include "rdmakit/connection.hpp"

#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstdio>

#include "rdmakit/error.hpp"

namespace rdmakit {
namespace {

// The device context RDMA CM uses for `name` (librdmacm opens each device once).
ibv_context* rdma_cm_context(const std::string& name) {
  int count = 0;
  ibv_context** contexts = rdma_get_devices(&count);
  if (!contexts) throw_verbs_error("rdma_get_devices", errno, "RDMA CM");
  ibv_context* found = nullptr;
  for (int i = 0; i < count && !found; ++i)
    if (name.empty() || name == ibv_get_device_name(contexts[i]->device)) found = contexts[i];
  rdma_free_devices(contexts);
  if (!found) throw Error(verbs_error(ENODEV), "RDMA CM has no device " + name);
  return found;
}

int mtu_bytes(ibv_mtu mtu) {
  return 128 << static_cast<int>(mtu);
}

}  // namespace

Resources::Resources(Token, Context ctx, const ResourceOptions& options)
    : context(std::move(ctx)),
      pd(context),
      channel(options.completion_channel ? std::make_unique<CompletionChannel>(context) : nullptr),
      cq(context, options.cq_depth, channel.get()),
      for_rdma_cm(options.for_rdma_cm) {}

std::shared_ptr<Resources> Resources::open(const ResourceOptions& options) {
  Context ctx = Context::open(options.device);
  if (options.for_rdma_cm)
    ctx = Context::borrow(rdma_cm_context(ctx.name()), ctx.port(), options.device.gid_index);
  return std::make_shared<Resources>(Token{}, std::move(ctx), options);
}

Connection::Connection(std::shared_ptr<Resources> resources, QueuePair qp, HandshakeOffer peer,
                       Negotiated negotiated, std::string via, rdma_cm_id* cm_id,
                       rdma_event_channel* cm_channel)
    : resources_(std::move(resources)),
      cm_id_(cm_id),
      cm_channel_(cm_channel),
      qp_(std::move(qp)),
      peer_(std::move(peer)),
      negotiated_(negotiated),
      via_(std::move(via)) {}

Connection::Connection(Connection&& other) noexcept {
  *this = std::move(other);
}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this == &other) return *this;
  release();
  resources_ = std::move(other.resources_);
  cm_id_ = std::exchange(other.cm_id_, nullptr);
  cm_channel_ = std::exchange(other.cm_channel_, nullptr);
  qp_ = std::move(other.qp_);
  peer_ = std::move(other.peer_);
  negotiated_ = other.negotiated_;
  via_ = std::move(other.via_);
  return *this;
}

Connection::~Connection() {
  release();
}

void Connection::release() noexcept {
  if (!cm_id_) return;
  rdma_disconnect(cm_id_);
  qp_ = QueuePair();  // the QP goes before its id
  rdma_destroy_id(cm_id_);
  if (cm_channel_) rdma_destroy_event_channel(cm_channel_);
  cm_id_ = nullptr;
  cm_channel_ = nullptr;
}

std::string Connection::summary() const {
  char text[256];
  std::snprintf(text, sizeof text,
                "RC QP 0x%x <-> 0x%x, MTU %d, rd_atomic %u, inline %u, send window %u, via %s",
                qp_.ready() ? qp_.qpn() : 0, peer_.address.qpn, mtu_bytes(negotiated_.path.mtu),
                negotiated_.path.initiator_depth, negotiated_.inline_size, negotiated_.send_window,
                via_.c_str());
  return text;
}

namespace detail {

QpBuilder builder_for(const Resources& resources, const ConnectionOptions& options) {
  QpBuilder b(resources.context, resources.pd, resources.cq);
  b.send_depth(options.caps.send_depth)
      .recv_depth(options.caps.recv_depth)
      .send_sge(options.caps.send_sge)
      .recv_sge(options.caps.recv_sge)
      .inline_size(options.caps.inline_size)
      .rd_atomic(options.caps.rd_atomic)
      .timeout(options.timers.timeout)
      .retry_count(options.timers.retry_count)
      .rnr_retry(options.timers.rnr_retry)
      .min_rnr_timer(options.timers.min_rnr_timer);
  if (options.srq) b.srq(*options.srq);
  return b;
}

HandshakeOffer make_offer(const Resources& resources, const QueuePair& qp,
                          const ConnectionOptions& options) {
  HandshakeOffer offer;
  offer.address = qp.address();
  offer.gid_type = resources.context.gid().entry.type;
  offer.mtu = resources.context.port_info().active_mtu;
  offer.inline_size = qp.caps().inline_size;
  offer.send_depth = qp.caps().send_depth;
  offer.recv_depth = qp.caps().recv_depth;
  offer.rd_atomic = qp.caps().rd_atomic;
  offer.user_data = options.user_data;
  return offer;
}

}  // namespace detail
}  // namespace rdmakit

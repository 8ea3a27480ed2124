// The RC transport's per-endpoint device: shared receive queue, completion routing, sleeping
// (see rc_device.hpp).
#include "rc/rc_device.hpp"

#include <algorithm>
#include <cstring>

#include "core/slot_receives.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::rpc::detail::rc {
namespace {

constexpr uint32_t kSharedReceives = 4096;
constexpr int kCompletionQueueDepth = 16384;
// Completions of QPs not attached yet that are kept: a peer's hello may arrive before the
// accepting side has made its link; more than this is not honest traffic.
constexpr size_t kMostEarly = 16;

}  // namespace

std::shared_ptr<RcDevice> RcDevice::open(bool for_rdma_cm, std::error_code& error) {
  try {
    ResourceOptions options;
    options.cq_depth = kCompletionQueueDepth;
    options.completion_channel = true;
    options.for_rdma_cm = for_rdma_cm;
    return std::make_shared<RcDevice>(Resources::open(options));
  } catch (const Error& e) {
    error = e.code();
    return nullptr;
  }
}

RcDevice::RcDevice(std::shared_ptr<Resources> resources)
    : resources_(std::move(resources)),
      srq_(std::make_shared<SharedReceiveQueue>(resources_->context, resources_->pd,
                                                kSharedReceives)),
      receive_slots_(resources_->pd, size_t{srq_->depth()} * kReceiveSlotBytes,
                     Access::local_write),
      payloads_(resources_->pd, Access::local_write) {
  resources_->channel->set_nonblocking();
  std::vector<uint32_t> all(srq_->depth());
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  post_receives(all);
}

RcDevice::~RcDevice() {
  disarm();  // events taken and acknowledged before the CQ goes
}

ConnectionOptions RcDevice::connection_options(uint32_t send_depth) const {
  ConnectionOptions o;
  o.caps.send_depth = send_depth;
  o.caps.recv_depth = 0;
  o.caps.inline_size = 128;
  o.srq = srq_;
  return o;
}

void RcDevice::post_receives(std::span<const uint32_t> slots) {
  // A failure here leaves fewer receives: peers then wait (RNR) rather than lose data.
  post_slot_receives(slots, receive_slots_, static_cast<uint32_t>(kReceiveSlotBytes), kReceiveTag,
                     [&](ibv_recv_wr& first) { (void)srq_->post_recv(first); });
}

void RcDevice::attach(uint32_t qpn, Client* client) {
  clients_[qpn] = client;
  auto it = early_.find(qpn);
  if (it == early_.end()) return;
  std::vector<Early> early = std::move(it->second);
  early_.erase(it);
  for (const Early& e : early)
    client->on_completion(e.wc, std::span<const std::byte>(e.sent.data(), e.sent_bytes));
}

void RcDevice::detach(uint32_t qpn) noexcept {
  clients_.erase(qpn);
  early_.erase(qpn);
}

void RcDevice::poll() {
  std::array<ibv_wc, 32> wcs;
  for (;;) {
    const int n = resources_->cq.poll(wcs);
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[static_cast<size_t>(i)];
      std::span<const std::byte> sent;
      if (wc.wr_id & kReceiveTag) {
        const auto slot = static_cast<uint32_t>(wc.wr_id & ~kReceiveTag);
        to_repost_.push_back(slot);
        if (wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV)
          sent = {receive_slots_.data() + slot * kReceiveSlotBytes,
                  std::min<size_t>(wc.byte_len, kReceiveSlotBytes)};
      }
      if (auto it = clients_.find(wc.qp_num); it != clients_.end()) {
        it->second->on_completion(wc, sent);
      } else if (wc.status == IBV_WC_SUCCESS && (wc.wr_id & kReceiveTag)) {
        std::vector<Early>& early = early_[wc.qp_num];
        if (early.size() < kMostEarly) {
          Early e{wc, {}, sent.size()};
          if (!sent.empty()) std::memcpy(e.sent.data(), sent.data(), sent.size());
          early.push_back(e);
        }
      }  // else: a QP already gone
    }
    if (n < static_cast<int>(wcs.size())) break;
  }
  if (!to_repost_.empty()) {
    post_receives(to_repost_);
    to_repost_.clear();
  }
}

void RcDevice::arm() {
  if (armed_) return;
  (void)resources_->cq.request_notify();
  armed_ = true;
}

void RcDevice::disarm() {
  std::error_code ec;
  while (resources_->cq.take_event(ec)) {
  }
  armed_ = false;
}

}  // namespace rdmakit::rpc::detail::rc

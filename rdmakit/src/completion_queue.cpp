#include "rdmakit/completion_queue.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>

#include "rdmakit/error.hpp"

namespace rdmakit {

CompletionChannel::CompletionChannel(const Context& context) {
  std::shared_ptr<ibv_context> ctx = context.handle();
  ibv_comp_channel* channel = ibv_create_comp_channel(ctx.get());
  if (!channel) throw_verbs_error("ibv_create_comp_channel", errno, context.name());
  channel_ = std::shared_ptr<ibv_comp_channel>(
      channel, [ctx](ibv_comp_channel* c) { ibv_destroy_comp_channel(c); });
}

ibv_comp_channel* CompletionChannel::get() const {
  RDMAKIT_REQUIRE(channel_ != nullptr, "use of a moved-from rdmakit::CompletionChannel");
  return channel_.get();
}

void CompletionChannel::set_nonblocking(bool nonblocking) const {
  const int flags = fcntl(fd(), F_GETFL);
  if (flags < 0 || fcntl(fd(), F_SETFL, nonblocking ? flags | O_NONBLOCK : flags & ~O_NONBLOCK) < 0)
    throw_verbs_error("fcntl(O_NONBLOCK)", errno, "completion channel");
}

const std::shared_ptr<ibv_comp_channel>& CompletionChannel::handle() const {
  get();
  return channel_;
}

CompletionQueue::CompletionQueue(const Context& context, int depth,
                                 const CompletionChannel* channel) {
  RDMAKIT_REQUIRE(depth > 0, "CompletionQueue depth must be positive");
  std::shared_ptr<ibv_context> ctx = context.handle();
  std::shared_ptr<ibv_comp_channel> ch = channel ? channel->handle() : nullptr;
  depth = std::min(depth, context.attributes().max_cqe);
  raw_ = ibv_create_cq(ctx.get(), depth, nullptr, ch.get(), 0);
  if (!raw_)
    throw_verbs_error("ibv_create_cq", errno,
                      context.name() + " (depth " + std::to_string(depth) + ")");
  cq_ = std::shared_ptr<ibv_cq>(raw_, [ctx, ch](ibv_cq* cq) { ibv_destroy_cq(cq); });
}

ibv_cq* CompletionQueue::get() const {
  RDMAKIT_REQUIRE(cq_ != nullptr, "use of a moved-from rdmakit::CompletionQueue");
  return raw_;
}

const std::shared_ptr<ibv_cq>& CompletionQueue::handle() const {
  get();
  return cq_;
}

std::error_code CompletionQueue::request_notify(bool solicited_only) const noexcept {
  if (int err = ibv_req_notify_cq(raw_, solicited_only ? 1 : 0)) return verbs_error(err);
  return {};
}

bool CompletionQueue::take_event(std::error_code& ec) const noexcept {
  RDMAKIT_REQUIRE(raw_->channel != nullptr, "take_event on a CQ without a completion channel");
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  if (ibv_get_cq_event(raw_->channel, &cq, &context) != 0) {
    ec = verbs_error(errno);
    return false;
  }
  ibv_ack_cq_events(cq, 1);
  ec.clear();
  return true;
}

}  // namespace rdmakit

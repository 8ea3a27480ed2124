// Completion channels and completion queues.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <span>
#include <system_error>

#include "rdmakit/context.hpp"

namespace rdmakit {

/// A file descriptor that becomes readable when an armed CQ has a completion; it works with
/// poll, epoll and Asio.
class CompletionChannel {
 public:
  explicit CompletionChannel(const Context& context);
  CompletionChannel(const CompletionChannel&) = delete;
  CompletionChannel& operator=(const CompletionChannel&) = delete;
  CompletionChannel(CompletionChannel&&) noexcept = default;
  CompletionChannel& operator=(CompletionChannel&&) noexcept = default;

  ibv_comp_channel* get() const;
  int fd() const { return get()->fd; }
  /// Makes get_event return EAGAIN instead of blocking when no event is pending.
  void set_nonblocking(bool nonblocking = true) const;
  const std::shared_ptr<ibv_comp_channel>& handle() const;

 private:
  std::shared_ptr<ibv_comp_channel> channel_;
};

class CompletionQueue {
 public:
  /// `depth` is clamped to the device's max_cqe. Throws Error on failure.
  CompletionQueue(const Context& context, int depth, const CompletionChannel* channel = nullptr);
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;
  CompletionQueue(CompletionQueue&&) noexcept = default;
  CompletionQueue& operator=(CompletionQueue&&) noexcept = default;

  ibv_cq* get() const;
  int depth() const { return get()->cqe; }

  /// Up to out.size() completions; returns how many, or -1 if the device failed.
  int poll(std::span<ibv_wc> out) const noexcept {
    return ibv_poll_cq(raw_, static_cast<int>(out.size()), out.data());
  }
  /// Arms the CQ: the channel fires on the next (solicited) completion.
  std::error_code request_notify(bool solicited_only = false) const noexcept;
  /// Takes the event the channel signalled for this CQ (blocking unless the channel is
  /// non-blocking) and acknowledges it. Returns false with `ec` set if there was none.
  bool take_event(std::error_code& ec) const noexcept;

  const std::shared_ptr<ibv_cq>& handle() const;

 private:
  ibv_cq* raw_ = nullptr;  ///< the data path avoids the shared_ptr indirection
  std::shared_ptr<ibv_cq> cq_;
};

}  // namespace rdmakit

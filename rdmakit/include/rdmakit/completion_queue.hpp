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
  /// Creates a channel on `context`. Throws Error.
  explicit CompletionChannel(const Context& context);
  CompletionChannel(const CompletionChannel&) = delete;
  CompletionChannel& operator=(const CompletionChannel&) = delete;
  /// Takes over the channel.
  CompletionChannel(CompletionChannel&&) noexcept = default;
  /// Releases this channel, then takes over the other.
  CompletionChannel& operator=(CompletionChannel&&) noexcept = default;

  /// The verbs channel.
  ibv_comp_channel* get() const;
  /// Its file descriptor, for poll/epoll.
  int fd() const { return get()->fd; }
  /// Makes get_event return EAGAIN instead of blocking when no event is pending.
  void set_nonblocking(bool nonblocking = true) const;
  /// Shared ownership, for CQs that must keep it alive.
  const std::shared_ptr<ibv_comp_channel>& handle() const;

 private:
  std::shared_ptr<ibv_comp_channel> channel_;
};

/// A completion queue; move-only, keeps its channel alive.
class CompletionQueue {
 public:
  /// `depth` is clamped to the device's max_cqe. Throws Error on failure.
  CompletionQueue(const Context& context, int depth, const CompletionChannel* channel = nullptr);
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;
  /// Takes over the CQ.
  CompletionQueue(CompletionQueue&&) noexcept = default;
  /// Releases this CQ, then takes over the other.
  CompletionQueue& operator=(CompletionQueue&&) noexcept = default;

  /// The verbs CQ.
  ibv_cq* get() const;
  /// Entries it holds (as the device granted).
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

  /// Shared ownership, for QPs that must keep it alive.
  const std::shared_ptr<ibv_cq>& handle() const;

 private:
  ibv_cq* raw_ = nullptr;  ///< the data path avoids the shared_ptr indirection
  std::shared_ptr<ibv_cq> cq_;
};

}  // namespace rdmakit

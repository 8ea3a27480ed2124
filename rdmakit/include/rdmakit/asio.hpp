// Waiting for completions inside an Asio io_context: the Poller's completion channel and
// wake-up fds are watched by the io_context; when one fires, completions are handled (their
// coroutines resumed) from an Asio handler. Operations queued by coroutines are posted from
// a handler too. No thread of its own, no busy polling: an idle io_context sleeps.
//
//   asio::io_context io;
//   rdmakit::AsioPoller driver(io, poller);  // poller built with the CQ's completion channel
//   spawn(my_coroutine());
//   io.run();
//
// Header-only, so rdmakit itself does not depend on Asio (Debian: libasio-dev).
#pragma once

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>

#include "rdmakit/poller.hpp"

namespace rdmakit {

/// Drives a Poller from an asio::io_context: waits on the completion channel and the
/// poller's wake fd instead of spinning, so an idle io_context costs no CPU.
class AsioPoller {
 public:
  /// Runs `poller` (built with its CQ's completion channel) on `io`'s threads until destroyed.
  AsioPoller(asio::io_context& io, Poller& poller)
      : io_(io),
        poller_(poller),
        channel_(io, poller.channel_fd()),
        wake_(io, poller.wake_fd()),
        timer_(io) {
    RDMAKIT_REQUIRE(poller.channel_fd() >= 0,
                    "AsioPoller needs a Poller built with its CQ's completion channel");
    channel_.non_blocking(true);  // take_channel_event must never block the io_context
    poller_.on_pending(&AsioPoller::pending, this);
    asio::post(io_, [this] { round(); });
  }
  AsioPoller(const AsioPoller&) = delete;
  AsioPoller& operator=(const AsioPoller&) = delete;
  ~AsioPoller() {
    poller_.on_pending(nullptr, nullptr);
    // The fds belong to the verbs library and the Poller.
    channel_.release();
    wake_.release();
  }

 private:
  /// Handles what is there and goes back to waiting on both fds (and on a timer while
  /// operations have deadlines).
  void round() {
    scheduled_ = false;
    if (!poller_.poll_and_arm()) {  // still busy: let other handlers run, then continue
      schedule();
      return;
    }
    if (!channel_waiting_) {
      channel_waiting_ = true;
      channel_.async_wait(asio::posix::descriptor_base::wait_read, [this](std::error_code ec) {
        channel_waiting_ = false;
        if (ec) return;
        poller_.take_channel_event();
        round();
      });
    }
    if (!wake_waiting_) {
      wake_waiting_ = true;
      wake_.async_wait(asio::posix::descriptor_base::wait_read, [this](std::error_code ec) {
        wake_waiting_ = false;
        if (ec) return;
        poller_.clear_wake();
        round();
      });
    }
    if (poller_.has_deadlines() && !timer_waiting_) {
      timer_waiting_ = true;
      timer_.expires_after(std::chrono::milliseconds(1));
      timer_.async_wait([this](std::error_code ec) {
        timer_waiting_ = false;
        if (ec) return;
        poller_.check_deadlines();
        round();
      });
    }
  }
  void schedule() {
    if (scheduled_) return;
    scheduled_ = true;
    asio::post(io_, [this] { round(); });
  }
  static void pending(void* self) noexcept { static_cast<AsioPoller*>(self)->schedule(); }

  asio::io_context& io_;
  Poller& poller_;
  asio::posix::stream_descriptor channel_;
  asio::posix::stream_descriptor wake_;
  asio::steady_timer timer_;
  bool scheduled_ = false;
  bool channel_waiting_ = false;
  bool wake_waiting_ = false;
  bool timer_waiting_ = false;
};

}  // namespace rdmakit

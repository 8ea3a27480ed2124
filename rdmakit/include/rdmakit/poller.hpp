// Drives the coroutine data path of the QPs sharing one completion queue: posts what their
// operations queued (one doorbell per QP per round), polls completions in batches and
// resumes the awaiting coroutines. Busy-poll with poll()/run_until() on the application's
// own thread, or sleep until the completion channel fires with wait() (or Asio, see
// rdmakit/asio.hpp). The library starts no thread of its own.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <system_error>

#include "rdmakit/async_queue_pair.hpp"
#include "rdmakit/completion_queue.hpp"

namespace rdmakit {

/// Drives the AsyncQueuePairs of one CQ on one thread: posts their batches, polls the CQ
/// and resumes awaiters, acts on timeouts and cancellations.
class Poller {
 public:
  /// Completions taken per ibv_poll_cq call.
  static constexpr int kBatch = 32;

  /// `channel` (the one `cq` was created with) is needed for wait().
  explicit Poller(const CompletionQueue& cq, const CompletionChannel* channel = nullptr);
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;
  ~Poller();

  /// One round: post pending operations, take up to kBatch completions and resume their
  /// awaiters, act on cancellations and timeouts. Returns the completions handled.
  int poll() noexcept;
  /// Busy-polls until done() is true.
  template <typename Done>
  void run_until(Done&& done) noexcept {
    while (!done()) poll();
  }
  /// Polls; when nothing is there, sleeps on the completion channel (and wake()) for at most
  /// `timeout`. Returns the completions handled, 0 on timeout.
  int wait(std::chrono::milliseconds timeout) noexcept;
  /// Makes a sleeping wait() return; callable from any thread.
  void wake() noexcept;

  /// For event loops (see rdmakit/asio.hpp): polls up to `rounds` times, then arms the CQ and
  /// polls once more for completions that raced with arming. Returns true when armed with
  /// nothing left (sleep until channel_fd() or wake_fd() is readable), false when completions
  /// keep coming (call again soon rather than sleeping).
  bool poll_and_arm(int rounds = 64) noexcept;
  /// Acknowledges the event that made channel_fd() readable (non-blocking).
  void take_channel_event() noexcept;
  /// An eventfd that wake() and cancellations make readable (for event loops).
  int wake_fd() const noexcept { return wake_fd_; }
  /// Resets wake_fd() after an event loop saw it readable.
  void clear_wake() noexcept;
  /// Operations with a timeout are in flight: an event loop must call poll() about every
  /// millisecond so their deadlines are acted on (cancellations wake wake_fd()).
  bool has_deadlines() const noexcept { return deadlines_ != 0; }
  /// Acts on passed deadlines and cancellations now (event loops call it on their timer).
  void check_deadlines() noexcept {
    if (timed_ != 0) sweep(true);
  }

  /// Called (on the polling thread) when operations are queued while none were pending, so
  /// an event loop that only polls when the channel fires can schedule a round.
  void on_pending(void (*hook)(void* context) noexcept, void* context) noexcept {
    pending_hook_ = hook;
    pending_context_ = context;
  }

  /// The CQ it polls.
  const CompletionQueue& cq() const noexcept { return cq_; }
  /// The completion channel's fd, or -1 without a channel.
  int channel_fd() const noexcept;
  /// Posts pending operations of every QP without polling (poll() and wait() do it too).
  void flush() noexcept;

 private:
  friend class AsyncQueuePair;
  friend struct detail::Operation;
  void mark_dirty(AsyncQueuePair* qp) noexcept;
  void attach(AsyncQueuePair* qp) noexcept;
  void detach(AsyncQueuePair* qp) noexcept;
  void sweep(bool read_clock) noexcept;

  const CompletionQueue& cq_;
  ibv_cq* raw_cq_;
  const CompletionChannel* channel_;
  int wake_fd_ = -1;
  std::array<ibv_wc, kBatch> completions_{};
  AsyncQueuePair* dirty_head_ = nullptr;
  AsyncQueuePair* attached_ = nullptr;  ///< every QP, linked through next_attached_
  uint32_t timed_ = 0;                  ///< operations with a timeout or a stop token
  uint32_t deadlines_ = 0;              ///< operations with a timeout
  uint32_t rounds_since_clock_ = 0;
  std::atomic<bool> attention_{false};  ///< a stop token fired somewhere
  detail::Operation::Steady::time_point next_sweep_{};
  void (*pending_hook_)(void*) noexcept = nullptr;
  void* pending_context_ = nullptr;
};

}  // namespace rdmakit

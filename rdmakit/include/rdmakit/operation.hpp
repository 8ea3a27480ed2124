// The state of one work request in flight, kept inside the awaiter (and so inside the
// coroutine frame): the work request's wr_id points at it, and the poller hands the
// completion back through `on_completion`. No allocation per operation.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <new>
#include <optional>
#include <stop_token>
#include <system_error>
#include <type_traits>

#include "rdmakit/error.hpp"

namespace rdmakit {

class AsyncQueuePair;

/// Per-operation options of the coroutine data path.
struct OpOptions {
  /// Zero: no timeout. A posted operation that times out moves its QP to ERROR (the device
  /// must stop touching the buffer before the awaiter completes) and ends with Errc::timed_out.
  std::chrono::nanoseconds timeout{0};
  /// Cancellation; same rule as a timeout once the operation is posted, Errc::canceled. The
  /// token must live until the operation is awaited (it is read then: the usual
  /// `co_await qp.write(..., {.stop = &token})` is fine). A pointer keeps OpOptions trivially
  /// destructible: GCC 12 may destroy a non-trivial temporary of a co_await expression twice.
  const std::stop_token* stop = nullptr;
};
static_assert(std::is_trivially_destructible_v<OpOptions>);

namespace detail {

/// An empty error code, copied where one is needed: constructing one calls
/// std::system_category(), out of line, which the data path would pay on every operation.
inline const std::error_code kNoError{};

struct Operation {
  using Steady = std::chrono::steady_clock;

  void (*on_completion)(Operation* self, const ibv_wc& wc) noexcept = nullptr;
  AsyncQueuePair* qp = nullptr;
  Operation* next = nullptr;  ///< in the QP's pending or in-flight list
  std::coroutine_handle<> waiter;
  std::error_code result = kNoError;
  uint32_t byte_len = 0;
  Steady::time_point deadline;  ///< set when submitted with a timeout, read only then
  std::atomic<bool> cancel_requested{false};
  Errc abandoned{};    ///< set when the poller gave up on it (timed_out or canceled)
  bool timed = false;  ///< has a timeout or a stop token: counted by its QP and poller
  std::chrono::nanoseconds timeout{0};
  const std::stop_token* stop = nullptr;  ///< OpOptions::stop, watched from submission on

  void request_cancel() noexcept;
  struct OnStop {
    Operation* op;
    void operator()() const noexcept { op->request_cancel(); }
  };
  using StopCallback = std::stop_callback<OnStop>;
  /// Registers with `stop` (may cancel at once, if it was already requested).
  void watch_stop() noexcept {
    new (stop_callback_) StopCallback(*stop, OnStop{this});
    watching_stop_ = true;
  }
  /// Unregisters; waits for a callback running on another thread.
  void unwatch_stop() noexcept {
    if (!watching_stop_) return;
    std::launder(reinterpret_cast<StopCallback*>(stop_callback_))->~StopCallback();
    watching_stop_ = false;
  }

 private:
  // Raw storage, constructed and destroyed by hand between submission and finish: an
  // Operation is part of every awaiter, and a trivial one costs nothing to create or drop.
  alignas(StopCallback) unsigned char stop_callback_[sizeof(StopCallback)];
  bool watching_stop_ = false;
};
static_assert(std::is_trivially_destructible_v<Operation>,
              "awaiters are made and dropped per operation: nothing to undo");

/// Work-request side of a send-queue operation.
struct SendOperation : Operation {
  /// Filled field by field when the operation is built: zeroing the whole work request
  /// first would cost more than the rest of the operation's set-up.
  ibv_send_wr wr;
  ibv_sge sge;
};

/// Work-request side of a receive.
struct RecvOperation : Operation {
  ibv_recv_wr wr{};
  ibv_sge sge{};
  std::optional<uint32_t> imm;
};

}  // namespace detail
}  // namespace rdmakit

// The endpoint's engine: sessions, the calls in flight, held requests, handlers, flushing,
// timeouts and liveness. It knows transports only through Link and Listener. One mechanism
// per file:
//   engine_poll.cpp  the poll loop, flushing, waiting (spin, then sleep), periodic sweep
//   calls.cpp        issuing calls, completing them, cancellation, deadlines, window waiters
//   replies.cpp      requests arriving, handles and tokens, replies
//   sessions.cpp     sessions opening and closing, liveness probes
#pragma once

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/call_slab.hpp"
#include "core/coarse_clock.hpp"
#include "core/doorbell.hpp"
#include "core/fifo.hpp"
#include "core/link.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/rpc/endpoint.hpp"

namespace rdmakit::rpc::detail {

/// A Fill that copies `bytes` the caller already has (a request or a reply); valid for the
/// call it is passed to.
inline auto copying(std::span<const std::byte> bytes) noexcept {
  return [bytes](std::span<std::byte> out) {
    if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  };
}

struct Session {
  Session(std::unique_ptr<Link> l, uint32_t index, uint32_t generation_)
      : link(std::move(l)), id{index, generation_}, calls(link->limits().window) {}

  std::unique_ptr<Link> link;
  SessionId id;
  bool open = true;
  bool close_requested = false;
  CallSlab calls;
  size_t reserved = 0;  // reply space reserved by our calls in flight (and a probe)
  uint32_t held = 0;    // the peer's requests not yet released by the application
  bool dirty = false;   // frames committed, not flushed
  bool marked = false;  // its peer can mark it ready (see Engine::poll)
  Clock::time_point last_heard{};
  Clock::time_point probe_sent{};
  bool probing = false;
  uint32_t probe_reservation = 0;
  CallAwaitable* waiters_head = nullptr;  // coroutine calls waiting for room, in order
  CallAwaitable* waiters_tail = nullptr;
};

class Engine final : private FrameSink {
 public:
  explicit Engine(const Options& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Options& options() const noexcept { return options_; }
  const std::shared_ptr<Doorbell>& doorbell() const noexcept { return doorbell_; }
  void set_listener(std::unique_ptr<Listener> listener);
  const std::string& url() const noexcept;
  SessionId add_session(std::unique_ptr<Link> link);
  /// What a transport keeps per endpoint (e.g. the RDMA device and shared receive queue),
  /// under a key of its own; it outlives every session.
  std::shared_ptr<void>& transport_state(const void* key) { return transport_states_[key]; }

  // engine_poll.cpp
  int poll(OnResponse* on_response);
  int wait(std::chrono::microseconds timeout, OnResponse* on_response);
  void set_default_callback(std::function<void(const Response&)> callback) {
    RDMAKIT_REQUIRE(!in_poll_, "rpc: on_response() called from inside poll()");
    default_callback_ = std::move(callback);
  }

  // calls.cpp
  CallResult call(SessionId session, size_t size, Fill fill, uint64_t user_data,
                  const CallOptions& options, CallAwaitable* awaiter);
  bool cancel(CallId id) noexcept;
  void wait_for_window(CallAwaitable& awaiter) noexcept;
  void forget(CallAwaitable& awaiter) noexcept;

  // replies.cpp
  std::optional<RecvHandle> recv() noexcept;
  void handle(uint32_t method, std::function<void(RecvHandle)> handler);
  std::error_code reply(HeldRequest& request, size_t size, Fill fill, Code code);
  std::error_code reply_error(HeldRequest& request, Code code, std::string_view message);
  /// A handle or token destroyed unanswered.
  void drop(HeldRequest& request) noexcept;

  // sessions.cpp
  size_t session_count() const noexcept { return open_sessions_; }
  size_t session_memory_bytes() const noexcept {
    size_t total = 0;
    for (const auto& s : sessions_) total += s && s->open ? s->link->memory_bytes() : 0;
    return total;
  }
  Session* find(SessionId id) const noexcept;
  /// `id` named a session of this endpoint once (it may be gone now).
  bool existed(SessionId id) const noexcept {
    return id.index < generations_.size() && id.generation < generations_[id.index];
  }
  void request_close(SessionId id) noexcept;

 private:
  // Above this many sessions whose peers can mark them ready, the engine asks for marks.
  static constexpr size_t kScanLimit = 8;

  void on_frame(const FrameHeader& header, std::span<const std::byte> payload,
                uint64_t cookie) override;

  // engine_poll.cpp
  int visit(Session& s);
  void mark_dirty(Session& s) noexcept;
  void flush_dirty() noexcept;
  void sweep();
  void sleep_until(Clock::time_point deadline);
  void update_wait_set(int fd, bool add) noexcept;

  // calls.cpp
  void on_response(Session& s, const FrameHeader& header, std::span<const std::byte> payload,
                   uint64_t cookie);
  void complete(Session& s, uint32_t slot, const Response& response);
  void deliver(const Response& response, CallAwaitable* awaiter);
  void expire_deadlines();
  void issue_waiting_calls(Session& s);
  void fail_calls(Session& s, Status status);

  // replies.cpp
  void on_request(Session& s, const FrameHeader& header, std::span<const std::byte> payload,
                  uint64_t cookie);
  void release_request(Session& s, uint64_t cookie) noexcept;

  // sessions.cpp
  void accept_sessions();
  void check_sessions(bool look_for_dead_peers);
  void close_session(Session& s, std::error_code why);
  void destroy_if_done(Session& s) noexcept;
  void probe(Session& s);
  void on_probe(Session& s, const FrameHeader& header, uint64_t cookie);

  Options options_;
  std::unordered_map<const void*, std::shared_ptr<void>> transport_states_;  // before sessions
  std::shared_ptr<Doorbell> doorbell_;
  std::unique_ptr<Listener> listener_;
  std::vector<std::unique_ptr<Session>> sessions_;  // by SessionId::index; null: free
  std::vector<uint32_t> generations_;               // next generation per index
  size_t open_sessions_ = 0;
  std::vector<Session*> dirty_;
  std::vector<uint32_t> scanned_;   // sessions whose peer cannot mark them: visited every round
  std::vector<uint32_t> markable_;  // sessions whose peer can mark them ready
  size_t ready_words_ = 0;          // words of the doorbell's ready set in use
  Fifo<HeldRequest> queue_;         // requests for recv(), in arrival order
  std::unordered_map<uint32_t, std::function<void(RecvHandle)>> handlers_;
  std::function<void(const Response&)> default_callback_;

  OnResponse* on_response_ = nullptr;  // the callback of the poll() running now
  Session* receiving_ = nullptr;       // the session whose frames on_frame() gets
  bool in_poll_ = false;
  CoarseClock clock_;
  Clock::time_point now_{};
  Clock::time_point next_sweep_{};
  Clock::time_point next_liveness_check_{};
  Clock::time_point next_deadline_ = Clock::time_point::max();
  bool cancels_pending_ = false;
  int epoll_fd_ = -1;
};

}  // namespace rdmakit::rpc::detail

// The RPC endpoint: one per thread, serving requests and making calls over any number of
// sessions. Server (rdmakit/rpc/server.hpp) and Client (rdmakit/rpc/client.hpp) are
// endpoints; a session is bidirectional, so either side may call the other.
//
// Progress happens only inside poll()/wait() on the owning thread; the library starts no
// thread. Inside poll():
//  - calls and replies queued since the last poll are sent (one flush per session),
//  - arriving responses complete their calls (callbacks run, coroutines resume),
//  - arriving requests go to their method's handler or to the recv() queue,
//  - timeouts and liveness are checked,
//  - what the callbacks and handlers produced is sent before poll() returns.
// Callbacks and handlers may call call()/reply() but must not re-enter poll()/wait().
#pragma once

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>

#include "rdmakit/rpc/function_ref.hpp"
#include "rdmakit/rpc/options.hpp"
#include "rdmakit/rpc/session.hpp"
#include "rdmakit/rpc/status.hpp"

namespace rdmakit::rpc {

namespace detail {
class Engine;
/// A request held by the application: pins its bytes where they arrived.
struct HeldRequest {
  Engine* engine = nullptr;
  SessionId session;
  uint32_t call_id = 0;
  uint32_t method = 0;
  uint32_t max_response = 0;
  uint64_t release_cookie = 0;
  std::span<const std::byte> data;
};
/// Owns a HeldRequest: moving hands it on, destroying it unanswered answers the caller
/// Code::cancelled. What RecvHandle and RequestToken share.
class PinnedRequest {
 public:
  PinnedRequest() = default;
  explicit PinnedRequest(HeldRequest held) noexcept : held_(held) {}
  PinnedRequest(PinnedRequest&& other) noexcept;
  PinnedRequest& operator=(PinnedRequest&& other) noexcept;
  ~PinnedRequest();

  const HeldRequest& get() const noexcept { return held_; }
  /// For the engine's reply, which empties it (engine = nullptr) when it consumes it.
  HeldRequest& get() noexcept { return held_; }
  /// Hands the request on; this one is empty afterwards.
  HeldRequest release() noexcept;

 private:
  HeldRequest held_;
};
}  // namespace detail

/// Builds a message in place: receives the span to fill (exactly the size asked for).
using Fill = FunctionRef<void(std::span<std::byte>)>;

/// A completed call. `data` is a zero-copy view of the response where it arrived, valid
/// during the callback (or, in a coroutine, until it next suspends). On failure, `data` is
/// empty and status.message says why.
struct Response {
  /// The value given to call(); 0 for the coroutine form.
  uint64_t user_data = 0;
  /// The session the call went over.
  SessionId session;
  /// ok, or why the call failed (from the server or from this side).
  Status status;
  /// The response's bytes (empty on failure).
  std::span<const std::byte> data;
};

/// Identifies one call: a slot index and a generation, so that no late or repeated
/// response can complete another call.
struct CallId {
  /// The session the call belongs to.
  SessionId session;
  /// Slot index and generation of the call within its session.
  uint32_t value = 0;
  friend bool operator==(CallId, CallId) = default;
};

/// The result of issuing a call: its id, or why it was not sent (Errc::would_block when the
/// window or the send space is full; nothing was sent and user_data is still the caller's).
struct CallResult {
  /// The call, when it was issued.
  CallId id;
  /// Why it was not issued (nothing was sent).
  std::error_code error;
  /// True when the call was issued.
  bool ok() const noexcept { return !error; }
};

/// A deferred reply: the request stays pinned (its bytes and its receive slot) until the
/// token is given to Endpoint::reply(); dropping it answers the caller Code::cancelled.
class RequestToken {
 public:
  RequestToken() = default;

  /// True while the token holds a request (not yet replied, not moved from).
  explicit operator bool() const noexcept { return held_.get().engine != nullptr; }
  /// The request's bytes, where they arrived.
  std::span<const std::byte> data() const noexcept { return held_.get().data; }
  /// The method the caller named.
  uint32_t method() const noexcept { return held_.get().method; }
  /// The session the request came over.
  SessionId session() const noexcept { return held_.get().session; }
  /// Bytes the caller reserved for the reply.
  uint32_t max_response() const noexcept { return held_.get().max_response; }

 private:
  friend class RecvHandle;
  friend class Endpoint;
  explicit RequestToken(detail::HeldRequest held) noexcept : held_(held) {}
  detail::PinnedRequest held_;
};

/// A received request. data() reads it where it arrived (no copy) and stays valid until the
/// handle is replied or destroyed, across poll() too; its receive slot is not reused before.
/// reply()/reply_with()/reply_error()/into_token() consume the handle (call them on an
/// rvalue: std::move(handle).reply(...)); replying twice is a programming error that stops
/// the program. A handle destroyed without a reply answers the caller Code::cancelled.
class RecvHandle {
 public:
  /// The request's bytes, where they arrived (no copy).
  std::span<const std::byte> data() const noexcept { return held_.get().data; }
  /// The method the caller named.
  uint32_t method() const noexcept { return held_.get().method; }
  /// The session the request came over.
  SessionId session() const noexcept { return held_.get().session; }
  /// Bytes the caller reserved for the reply: a larger reply is refused.
  uint32_t max_response() const noexcept { return held_.get().max_response; }

  /// Sends `response` (copied once into the transport's send space). Never fails for lack
  /// of space (the caller reserved it); fails with Errc::response_too_large (the caller gets
  /// Code::resource_exhausted) or Errc::session_closed.
  std::error_code reply(std::span<const std::byte> response) &&;
  /// Builds the reply of `size` bytes in place in the send space through `fill`.
  std::error_code reply_with(size_t size, Fill fill) &&;
  /// Answers with a failure status (its message travels to the caller).
  std::error_code reply_error(Code code, std::string_view message = {}) &&;
  /// Keeps the request for a reply later, in any order: Endpoint::reply(std::move(token), ..).
  RequestToken into_token() && noexcept;

 private:
  friend class detail::Engine;
  friend class Endpoint;
  explicit RecvHandle(detail::HeldRequest held) noexcept : held_(held) {}
  detail::PinnedRequest held_;
};

/// `co_await endpoint.call(...)`: issues the call (suspending while the window is full),
/// resumes the coroutine inside poll() with the Response. Lives in the coroutine frame: no
/// allocation per call. Destroying the awaiting coroutine cancels the call.
class [[nodiscard]] CallAwaitable {
 public:
  CallAwaitable(const CallAwaitable&) = delete;
  CallAwaitable& operator=(const CallAwaitable&) = delete;
  /// Cancels the call if it is still pending.
  ~CallAwaitable();

  /// Issues the call; true only if it completed at once (e.g. the session is closed).
  bool await_ready() noexcept;
  /// Suspends until the response (or until the window has room to issue it).
  void await_suspend(std::coroutine_handle<> waiting) noexcept;
  /// The completed call.
  Response await_resume() noexcept { return result_; }

 private:
  friend class detail::Engine;
  friend class Endpoint;
  CallAwaitable(detail::Engine* engine, SessionId session, std::span<const std::byte> request,
                const CallOptions& options) noexcept
      : engine_(engine), session_(session), request_(request), options_(options) {}
  bool try_issue() noexcept;  ///< false: the window is full, wait

  enum class State : uint8_t { created, waiting_for_window, in_flight, done };
  detail::Engine* engine_;
  SessionId session_;
  std::span<const std::byte> request_;
  CallOptions options_;
  std::coroutine_handle<> waiting_;
  Response result_;
  CallId id_;
  State state_ = State::created;
  CallAwaitable* next_waiter_ = nullptr;
};

/// A response callback for calls made with user_data.
using OnResponse = FunctionRef<void(const Response&)>;

/// The common interface of Client and Server: calls, requests, replies and progress on
/// any number of sessions, over any transport. One thread drives an endpoint (see the top
/// of this header).
class Endpoint {
 public:
  /// Takes over the other endpoint's sessions and calls.
  Endpoint(Endpoint&&) noexcept;
  /// Closes this endpoint's sessions, then takes over the other's.
  Endpoint& operator=(Endpoint&&) noexcept;
  /// Closes every session: pending calls complete with Code::unavailable first.
  ~Endpoint();

  /// One round of progress (see the top of this header). Responses to calls made with
  /// user_data go to `on_response`. Returns the messages handled.
  int poll(OnResponse on_response);
  /// As poll(on_response), with the callback given to on_response() (or none: then a
  /// response to a user_data call is a programming error).
  int poll();
  /// Polls until something is handled or `timeout` passes; in Mode::blocking it sleeps
  /// after Options::spin. Returns the messages handled (0: timed out).
  int wait(std::chrono::microseconds timeout, OnResponse on_response);
  /// As wait(timeout, on_response), with the callback given to on_response().
  int wait(std::chrono::microseconds timeout);
  /// The callback poll() and wait() use when not given one. Not from inside poll().
  void on_response(std::function<void(const Response&)> callback);

  /// The next request not taken by a handler, in arrival order per session.
  std::optional<RecvHandle> recv() noexcept;
  /// Requests for `method` go to `handler`, called from poll() (replaces an earlier one).
  /// Not from inside poll() (a handler or callback): that stops the program.
  void handle(uint32_t method, std::function<void(RecvHandle)> handler);

  /// Calls over `session`: copies the request into the send space and reserves
  /// max_response for the reply. Never blocks: Errc::would_block when the window or the
  /// send space is full (poll and retry). The response reaches poll()'s callback with
  /// `user_data`.
  CallResult call(SessionId session, std::span<const std::byte> request, uint64_t user_data,
                  const CallOptions& options = {});
  /// As call(), building the request of `size` bytes in place through `fill`.
  CallResult call_with(SessionId session, size_t size, Fill fill, uint64_t user_data,
                       const CallOptions& options = {});
  /// The coroutine form: `Response r = co_await endpoint.call(session, request);`.
  CallAwaitable call(SessionId session, std::span<const std::byte> request,
                     const CallOptions& options = {}) noexcept;
  /// Completes a pending call now with Code::cancelled (false: it already completed). Its
  /// late response is discarded.
  bool cancel(CallId id) noexcept;

  /// Deferred replies (see RecvHandle).
  std::error_code reply(RequestToken&& token, std::span<const std::byte> response);
  /// As reply(), building the reply of `size` bytes in place through `fill`.
  std::error_code reply_with(RequestToken&& token, size_t size, Fill fill);
  /// Answers the held request with a failure status and `message`.
  std::error_code reply_error(RequestToken&& token, Code code, std::string_view message = {});

  /// Opens another session from this endpoint, to any server (see server.hpp for the URLs).
  /// Calls on all of an endpoint's sessions share its poll round and its one flush, so a
  /// thread that talks to many peers should use one endpoint with many sessions.
  SessionId open_session(std::string_view url);
  /// As open_session(url); on failure sets `error` and returns an invalid id.
  SessionId open_session(std::string_view url, std::error_code& error);

  /// Sessions currently open.
  size_t session_count() const noexcept;
  /// Bytes the transports allocated for the open sessions on this side (rings, receive
  /// buffers), where they know it (RDMA RC); 0 otherwise.
  size_t session_memory_bytes() const noexcept;
  /// True while `session` is one of this endpoint's open sessions.
  bool is_open(SessionId session) const noexcept;
  /// Closes a session: its pending calls complete with Code::unavailable.
  void close(SessionId session) noexcept;
  /// Calls in flight on a session (issued, response not yet handled).
  uint32_t in_flight(SessionId session) const noexcept;

  /// The options the endpoint was made with.
  const Options& options() const noexcept;

 protected:
  /// For Client and Server: an endpoint over a transport's engine.
  explicit Endpoint(std::unique_ptr<detail::Engine> engine) noexcept;
  /// The engine, for Client and Server.
  detail::Engine& engine() const noexcept { return *engine_; }

 private:
  std::unique_ptr<detail::Engine> engine_;
};

}  // namespace rdmakit::rpc

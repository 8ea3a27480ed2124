// Options of an RPC endpoint (one per thread) and of a single call.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "rdmakit/rpc/session.hpp"

namespace rdmakit::rpc {

using Clock = std::chrono::steady_clock;

/// How an endpoint waits in wait(): spin only (lowest latency, one core busy), or spin for
/// `Options::spin` and then sleep on a file descriptor until a peer signals it (an idle
/// endpoint uses no CPU; the peer pays a wake-up system call when it finds it asleep).
enum class Mode : uint8_t { busy_poll, blocking };

/// What happened to a session, reported through Options::on_session.
enum class SessionEvent : uint8_t { opened, closed };

/// How an endpoint behaves: progress mode, window and ring sizes, timeouts, callbacks.
struct Options {
  /// Busy-polling (default) or blocking progress in wait().
  Mode mode = Mode::busy_poll;
  /// Blocking mode: how long wait() polls before it sleeps.
  std::chrono::microseconds spin{50};

  /// Calls in flight per session and direction (the request window). A call beyond it
  /// returns Errc::would_block (the coroutine form suspends until a slot frees).
  uint32_t window = 64;
  /// Per session and direction: bytes of ring for requests, and for responses (shared
  /// memory and in-process transports; rounded up to pages). Messages larger than a quarter
  /// of a ring travel out of line (a separate buffer), so they are not limited by it.
  uint32_t ring_bytes = 256 * 1024;
  /// The largest request or response payload a session accepts.
  uint32_t max_message_bytes = 16u << 20;
  /// Response space reserved by a call that does not say (CallOptions::max_response).
  uint32_t default_max_response = 4096;
  /// Timeout of a call that does not give its own; zero: none.
  std::chrono::milliseconds default_timeout{30'000};
  /// Liveness: a session from which nothing arrived for this long while calls were pending
  /// is probed (a ping); with no answer for another such period it is closed and its calls
  /// complete with Code::unavailable. Zero turns probing off (a dead process or a closed
  /// connection is still detected at once).
  std::chrono::milliseconds peer_timeout{5'000};
  /// Requests whose method has no handler: queued for recv() (true) or answered
  /// Code::unimplemented (false).
  bool queue_unhandled = true;
  /// Connecting: how long connect() waits for the server.
  std::chrono::milliseconds connect_timeout{5'000};

  /// Called from poll() when a session opens or closes.
  std::function<void(SessionId, SessionEvent)> on_session;
};

/// Per-call settings.
struct CallOptions {
  /// The request's method (eRPC's req_type): selects the server's handler.
  uint32_t method = 0;
  /// Response bytes reserved for this call's reply (0: Options::default_max_response). The
  /// server's reply may not be larger: it is refused with Errc::response_too_large and the
  /// caller gets Code::resource_exhausted.
  uint32_t max_response = 0;
  /// Timeout of this call (zero: Options::default_timeout).
  std::chrono::milliseconds timeout{0};
};

}  // namespace rdmakit::rpc

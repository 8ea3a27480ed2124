// What a call ended with. Every response, successful or not, reaches the caller with a
// Status (gRPC's canonical codes), and API calls that can fail return a std::error_code
// from rdmakit::rpc::Errc.
#pragma once

#include <cstdint>
#include <string_view>
#include <system_error>

namespace rdmakit::rpc {

/// gRPC's canonical status codes; carried on the wire as one byte.
enum class Code : uint8_t {
  ok = 0,
  cancelled,  ///< the caller cancelled, or the server dropped the request unanswered
  unknown,
  invalid_argument,
  deadline_exceeded,  ///< the call's timeout passed before its response arrived
  not_found,
  already_exists,
  permission_denied,
  resource_exhausted,  ///< e.g. the server's reply was larger than the caller reserved
  failed_precondition,
  aborted,
  out_of_range,
  unimplemented,  ///< no handler for the method
  internal,
  unavailable,  ///< the session closed: peer died, disconnected or stopped answering
  data_loss,
  unauthenticated,
};
inline constexpr uint8_t kLastCode = static_cast<uint8_t>(Code::unauthenticated);

/// The name of a code ("deadline_exceeded").
std::string_view code_name(Code code) noexcept;

/// The outcome of one call. `message` explains a failure; it points into the response's
/// bytes or at a static string and is valid as long as the response is.
struct Status {
  /// The outcome.
  Code code = Code::ok;
  /// Why, for a failure (may be empty).
  std::string_view message;

  /// True for Code::ok.
  bool ok() const noexcept { return code == Code::ok; }
};

/// Failures of the RPC API itself.
enum class Errc {
  would_block = 1,     ///< the session's window or send space is full: poll() and retry
  message_too_large,   ///< the request or reply exceeds the session's message size limit
  response_too_large,  ///< the reply is larger than the caller reserved (max_response)
  session_closed,      ///< the session is closed (peer gone, disconnected, protocol error)
  no_such_session,     ///< the session id is not (or no longer) one of this endpoint's
  bad_url,             ///< not scheme://address, or a scheme without a transport
  protocol_error,      ///< the peer broke the protocol (malformed frame, bad index)
  not_listening,       ///< nothing listens at that address
  too_many_sessions,   ///< the server admits no more sessions (ud://: its receive buffers are
                       // all reserved for the sessions it has)
};
const std::error_category& rpc_category() noexcept;
inline std::error_code make_error_code(Errc e) noexcept {
  return {static_cast<int>(e), rpc_category()};
}

}  // namespace rdmakit::rpc

/// @cond STD_SPECIALISATIONS (lets Errc convert to std::error_code; not part of the API)
template <>
struct std::is_error_code_enum<rdmakit::rpc::Errc> : std::true_type {};
/// @endcond

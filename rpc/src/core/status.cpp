#include "rdmakit/rpc/status.hpp"

#include <array>
#include <string>

namespace rdmakit::rpc {
namespace {

class RpcCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "rdmakit.rpc"; }
  std::string message(int e) const override {
    switch (static_cast<Errc>(e)) {
      case Errc::would_block:
        return "window or send space full; poll and retry";
      case Errc::message_too_large:
        return "message exceeds the session's size limit";
      case Errc::response_too_large:
        return "reply larger than the caller reserved";
      case Errc::session_closed:
        return "session closed";
      case Errc::no_such_session:
        return "no such session";
      case Errc::bad_url:
        return "bad URL (expected inproc://NAME, shm://NAME, tcp://HOST:PORT, rc://HOST:PORT, "
               "rc+tcp://HOST:PORT or ud://HOST:PORT)";
      case Errc::protocol_error:
        return "the peer broke the protocol";
      case Errc::not_listening:
        return "nothing listens at that address";
      case Errc::too_many_sessions:
        return "the server admits no more sessions";
    }
    return "unknown rpc error";
  }
  std::error_condition default_error_condition(int e) const noexcept override {
    switch (static_cast<Errc>(e)) {
      case Errc::would_block:
        return std::errc::resource_unavailable_try_again;
      case Errc::message_too_large:
        return std::errc::message_size;
      case Errc::session_closed:
        return std::errc::connection_reset;
      case Errc::not_listening:
        return std::errc::connection_refused;
      default:
        return {e, *this};
    }
  }
};

}  // namespace

const std::error_category& rpc_category() noexcept {
  static const RpcCategory category;
  return category;
}

std::string_view code_name(Code code) noexcept {
  static constexpr std::array<std::string_view, kLastCode + 1> names{"ok",
                                                                     "cancelled",
                                                                     "unknown",
                                                                     "invalid_argument",
                                                                     "deadline_exceeded",
                                                                     "not_found",
                                                                     "already_exists",
                                                                     "permission_denied",
                                                                     "resource_exhausted",
                                                                     "failed_precondition",
                                                                     "aborted",
                                                                     "out_of_range",
                                                                     "unimplemented",
                                                                     "internal",
                                                                     "unavailable",
                                                                     "data_loss",
                                                                     "unauthenticated"};
  const auto i = static_cast<size_t>(code);
  return i < names.size() ? names[i] : "invalid";
}

}  // namespace rdmakit::rpc

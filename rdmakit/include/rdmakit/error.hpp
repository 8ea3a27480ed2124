// Errors, in two kinds (see docs/user-guide.md, "Errors"):
//  - a programming error (a buffer outside its region, posting on a QP that is not connected,
//    using a moved-from object) stops the program with a message naming the mistake;
//  - a runtime error (the device refused, the peer is gone, a timeout) is reported: throwing
//    calls raise rdmakit::Error, overloads taking std::error_code& report instead, and the data
//    path only ever returns codes or work-completion statuses.
#pragma once

#include <infiniband/verbs.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace rdmakit {

/// errno values returned by verbs and RDMA CM calls. Compares equal to std::errc values.
const std::error_category& verbs_category() noexcept;
/// ibv_wc_status values of failed work completions ("remote access error", ...).
const std::error_category& completion_category() noexcept;

inline std::error_code verbs_error(int err) noexcept {
  return {err, verbs_category()};
}
inline std::error_code completion_error(ibv_wc_status status) noexcept {
  return {static_cast<int>(status), completion_category()};
}

/// Failures of rdmakit's own protocols and operations.
enum class Errc {
  timed_out = 1,        ///< an operation or a connection step took longer than allowed
  canceled,             ///< a stop_token asked for it
  peer_closed,          ///< the peer closed the connection or died
  handshake_malformed,  ///< the peer's handshake message is not one of ours
  handshake_version,    ///< the peer speaks another handshake version
  handshake_mismatch,   ///< GID type or subnet differ: the QPs could never reach each other
  rejected,             ///< the peer refused the connection
  budget_exhausted,     ///< a registered-memory budget has no room left
  grant_too_wide,       ///< a grant asks for rights the owner does not allow
};
const std::error_category& rdmakit_category() noexcept;
inline std::error_code make_error_code(Errc e) noexcept {
  return {static_cast<int>(e), rdmakit_category()};
}

/// A runtime error of a throwing call: what() names the verb, the object and the cause.
class Error : public std::system_error {
 public:
  /// An error with `code` and the explanation `what`.
  Error(std::error_code code, const std::string& what) : std::system_error(code, what) {}
};

/// Throws Error "<verb> on <object>: <strerror(err)>".
[[noreturn]] void throw_verbs_error(std::string_view verb, int err, std::string_view object);
/// Throws Error for `code` with a message "<context>: <code.message()>".
[[noreturn]] void throw_error(std::error_code code, std::string_view context);

/// Prints "rdmakit: programming error: <message>" and aborts.
[[noreturn]] void programming_error(std::string_view message) noexcept;

}  // namespace rdmakit

/// @cond STD_SPECIALISATIONS (lets Errc convert to std::error_code; not part of the API)
template <>
struct std::is_error_code_enum<rdmakit::Errc> : std::true_type {};
/// @endcond

// Checks a precondition that only a programming mistake can break.
#define RDMAKIT_REQUIRE(condition, message)  \
  do {                                       \
    if (!(condition)) [[unlikely]]           \
      ::rdmakit::programming_error(message); \
  } while (false)

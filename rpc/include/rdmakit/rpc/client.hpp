// rpc::Client: an endpoint with one session to a server (see server.hpp for the URLs).
#pragma once

#include <optional>
#include <string_view>
#include <system_error>

#include "rdmakit/rpc/endpoint.hpp"

namespace rdmakit::rpc {

/// An endpoint with one session to a server, connected by Client::connect().
class Client : public Endpoint {
 public:
  /// Connects within Options::connect_timeout; throws rdmakit::Error on failure.
  static Client connect(std::string_view url, const Options& options = {});
  /// As connect(url, options); on failure sets `error` and returns an empty optional.
  static std::optional<Client> connect(std::string_view url, const Options& options,
                                       std::error_code& error);

  /// The session to the server.
  SessionId session() const noexcept { return session_; }

  using Endpoint::call;
  using Endpoint::call_with;
  /// Endpoint::call() on the client's session.
  CallResult call(std::span<const std::byte> request, uint64_t user_data,
                  const CallOptions& options = {}) {
    return Endpoint::call(session_, request, user_data, options);
  }
  /// Endpoint::call_with() on the client's session.
  CallResult call_with(size_t size, Fill fill, uint64_t user_data,
                       const CallOptions& options = {}) {
    return Endpoint::call_with(session_, size, fill, user_data, options);
  }
  /// The coroutine form of call() on the client's session.
  CallAwaitable call(std::span<const std::byte> request, const CallOptions& options = {}) noexcept {
    return Endpoint::call(session_, request, options);
  }
  /// The session is open (false once the server died, disconnected or was closed).
  bool connected() const noexcept { return is_open(session_); }

 private:
  Client(std::unique_ptr<detail::Engine> engine, SessionId session) noexcept;
  SessionId session_;
};

}  // namespace rdmakit::rpc

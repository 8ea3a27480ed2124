// rpc::Client: an endpoint with one session to a server (see server.hpp for the URLs).
#pragma once

#include <optional>
#include <string_view>
#include <system_error>

#include "rdmakit/rpc/endpoint.hpp"

namespace rdmakit::rpc {

class Client : public Endpoint {
 public:
  /// Connects within Options::connect_timeout; throws rdmakit::Error on failure.
  static Client connect(std::string_view url, const Options& options = {});
  static std::optional<Client> connect(std::string_view url, const Options& options,
                                       std::error_code& error);

  SessionId session() const noexcept { return session_; }

  using Endpoint::call;
  using Endpoint::call_with;
  CallResult call(std::span<const std::byte> request, uint64_t user_data,
                  const CallOptions& options = {}) {
    return Endpoint::call(session_, request, user_data, options);
  }
  CallResult call_with(size_t size, Fill fill, uint64_t user_data,
                       const CallOptions& options = {}) {
    return Endpoint::call_with(session_, size, fill, user_data, options);
  }
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

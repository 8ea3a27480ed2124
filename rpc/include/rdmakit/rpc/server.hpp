// rpc::Server: an endpoint that listens on a URL and accepts sessions inside poll().
//   inproc://NAME     threads of this process
//   shm://NAME        processes on this host (rings in shared memory; owner-only socket)
//   tcp://HOST:PORT   any host (PORT 0: a free port, see url())
// Several server threads each listen with their own Server: inproc/shm under their own
// names, tcp on the same HOST:PORT (the kernel spreads connections, SO_REUSEPORT).
#pragma once

#include <string>
#include <string_view>
#include <system_error>

#include "rdmakit/rpc/endpoint.hpp"

namespace rdmakit::rpc {

/// An endpoint that listens at a URL and admits a session per connecting client.
class Server : public Endpoint {
 public:
  /// Listens; throws rdmakit::Error (Errc::bad_url, address in use, ...).
  static Server listen(std::string_view url, const Options& options = {});
  /// Listens; on failure sets `error` and returns an empty optional.
  static std::optional<Server> listen(std::string_view url, const Options& options,
                                      std::error_code& error);

  /// The URL clients connect to (with the real port when listening on port 0).
  const std::string& url() const noexcept;

 private:
  using Endpoint::Endpoint;
};

}  // namespace rdmakit::rpc

// tcp://HOST:PORT: one TCP connection per session, carried by a StreamLink over a SocketStream
// (stream/stream_link.hpp). Both sides open with a 24-byte hello (magic, version, window, message
// size limit). Connecting needs no answer from the server, which may be polled by the same thread
// only afterwards: the client sends its hello and keeps its own limits; its link checks the
// server's hello when it arrives. The server takes the client's limits if they are within its own
// and drops the connection otherwise (as shm does). Connecting blocks up to
// Options::connect_timeout for the TCP connection only. The server never blocks: a
// connection whose hello has not fully arrived waits aside (tcp/hello_acceptor.hpp).
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>

#include "core/engine.hpp"
#include "core/transports.hpp"
#include "stream/stream_link.hpp"
#include "tcp/hello_acceptor.hpp"
#include "tcp/socket_stream.hpp"
#include "tcp/sockets.hpp"
#include "tcp/tcp_hello.hpp"

namespace rdmakit::rpc::detail {
namespace {

// Clients refused per accept() call, so that a flood of them cannot hold up the server.
constexpr int kRefusalsPerCall = 16;

TcpHello own_hello(const Options& options) {
  return {kTcpHelloMagic, kTcpHelloVersion, options.window, options.max_message_bytes, 0};
}

/// The client's limits, which the server takes when they are within its own; nothing for a
/// client of another protocol or one asking for more.
std::optional<LinkLimits> admit(const TcpHello& server, const TcpHello& client) {
  if (!compatible(client) || client.window == 0 || client.window > server.window ||
      client.max_message_bytes > server.max_message_bytes)
    return std::nullopt;
  return LinkLimits{client.window, client.max_message_bytes};
}

/// The session of `fd`, whose own hello is sent; `awaits_hello`: the peer's is not read yet.
/// nullptr (and `fd` closed) when out of descriptors.
std::unique_ptr<Link> open_link(int fd, LinkLimits limits, bool awaits_hello) {
  std::error_code error;
  std::unique_ptr<SocketStream> stream = SocketStream::open(fd, error);
  if (!stream) return nullptr;
  const StreamLink::AwaitedHello hello{awaits_hello ? sizeof(TcpHello) : 0, compatible_hello};
  return std::make_unique<StreamLink>(std::move(stream), limits, hello);
}

class TcpListener final : public Listener {
 public:
  TcpListener(std::unique_ptr<HelloAcceptor> acceptor, std::string url, const Options& options)
      : acceptor_(std::move(acceptor)), url_(std::move(url)), own_(own_hello(options)) {}

  std::unique_ptr<Link> accept() override {
    TcpHello peer;
    for (int refused = 0; refused < kRefusalsPerCall; ++refused) {
      const int fd = acceptor_->next(std::as_writable_bytes(std::span(&peer, 1)));
      if (fd < 0) break;
      if (const std::optional<LinkLimits> limits = admit(own_, peer))
        return open_link(fd, *limits, false);
      close(fd);
    }
    return nullptr;
  }
  int wait_fd() const override { return acceptor_->wait_fd(); }
  const std::string& url() const override { return url_; }

 private:
  std::unique_ptr<HelloAcceptor> acceptor_;
  std::string url_;
  TcpHello own_;
};

}  // namespace

std::unique_ptr<Listener> listen_tcp(const std::string& host_port, Engine& engine,
                                     std::error_code& error) {
  HostPort where;
  const Addresses addresses = resolve(host_port, true, where, error);
  if (!addresses) return nullptr;
  const int fd = listen_on(addresses, error);
  if (fd < 0) return nullptr;
  const uint16_t port = bound_port(fd);
  const TcpHello own = own_hello(engine.options());
  const auto greeting = std::as_bytes(std::span(&own, 1));
  std::unique_ptr<HelloAcceptor> acceptor =
      HelloAcceptor::open(fd, sizeof(TcpHello), {greeting.begin(), greeting.end()},
                          engine.options().connect_timeout, error);
  if (!acceptor) return nullptr;
  error.clear();
  return std::make_unique<TcpListener>(std::move(acceptor),
                                       "tcp://" + where.written_host + ":" + std::to_string(port),
                                       engine.options());
}

std::unique_ptr<Link> connect_tcp(const std::string& host_port, Engine& engine,
                                  std::error_code& error) {
  HostPort where;
  const Addresses addresses = resolve(host_port, false, where, error);
  if (!addresses) return nullptr;
  const Clock::time_point deadline = Clock::now() + engine.options().connect_timeout;
  const TcpHello own = own_hello(engine.options());
  // A name may have several addresses ("localhost": ::1 and 127.0.0.1): the first that
  // accepts.
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    const int fd = connect_socket(*a, deadline, error);
    if (fd < 0) {
      if (error == std::errc::timed_out) return nullptr;
      continue;
    }
    if (!send_all(fd, std::as_bytes(std::span(&own, 1)), deadline, error)) {
      close(fd);
      return nullptr;
    }
    std::unique_ptr<Link> link = open_link(fd, LinkLimits{own.window, own.max_message_bytes}, true);
    if (link)
      error.clear();
    else
      error = std::make_error_code(std::errc::too_many_files_open);
    return link;
  }
  return nullptr;
}

}  // namespace rdmakit::rpc::detail

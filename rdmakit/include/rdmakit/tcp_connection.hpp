// The TCP back end: QP attributes are exchanged over a TCP connection (the handshake of
// handshake.hpp in frames), then the QPs are connected directly. Works with any verbs
// device, no RDMA CM needed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rdmakit/connection.hpp"

namespace rdmakit {
namespace detail {
class ServerHandshake;
}

/// Accepts connections whose handshake travels over a TCP socket (as perftest's).
class TcpAcceptor : public detail::LastFailure {
 public:
  /// Listens on address:port (port 0: an ephemeral one, see port()). Throws Error.
  TcpAcceptor(std::shared_ptr<Resources> resources, const std::string& address = "0.0.0.0",
              uint16_t port = 0, ConnectionOptions options = {});
  TcpAcceptor(const TcpAcceptor&) = delete;
  TcpAcceptor& operator=(const TcpAcceptor&) = delete;
  ~TcpAcceptor();

  /// The port it listens on (the ephemeral one when 0 was asked).
  uint16_t port() const noexcept { return port_; }
  /// Readable when a client is waiting (for event loops).
  int fd() const noexcept { return fd_; }

  /// Waits for a client and completes its handshake (bounded by options.timeout). Safe to call
  /// from several threads at once: each serves one client. Throws Error with the explanation.
  Connection accept();
  /// Same, reporting failures (a refused or mismatched peer: Errc::handshake_*).
  Connection accept(std::error_code& ec);
  /// Gives up with Errc::timed_out if no client arrives within `wait`.
  Connection accept_for(std::chrono::milliseconds wait, std::error_code& ec);

  /// For an event loop that must never wait: takes the clients waiting and moves every
  /// handshake in progress as far as what has arrived allows. A connection whose handshake
  /// completed, or an empty one (a failed handshake is remembered: explanation()). At most
  /// 64 handshakes are in progress at once (more clients drop the oldest), each for at most
  /// options.timeout. One thread at a time.
  Connection accept_ready();
  /// Readable when accept_ready() has work: a client waiting, or a handshake that can move.
  int ready_fd() const noexcept { return epoll_fd_; }

 private:
  /// Stops watching handshake `index` and drops it (its socket closes).
  void forget(size_t index);

  std::shared_ptr<Resources> resources_;
  ConnectionOptions options_;
  int fd_ = -1;
  uint16_t port_ = 0;
  int epoll_fd_ = -1;  // the listening socket and the sockets of handshakes_
  std::vector<std::unique_ptr<detail::ServerHandshake>> handshakes_;  // oldest first
};

/// Connects to a TcpAcceptor: TCP connect, handshake, then the QP is connected.
class TcpConnector : public detail::LastFailure {
 public:
  /// Connections share `resources`.
  explicit TcpConnector(std::shared_ptr<Resources> resources, ConnectionOptions options = {});

  /// Connects to a TcpAcceptor. Throws Error with the explanation.
  Connection connect(const std::string& host, uint16_t port);
  /// As connect(host, port), reporting a failure in `ec`.
  Connection connect(const std::string& host, uint16_t port, std::error_code& ec);

 private:
  std::shared_ptr<Resources> resources_;
  ConnectionOptions options_;
};

static_assert(Acceptor<TcpAcceptor>);
static_assert(Connector<TcpConnector>);

}  // namespace rdmakit

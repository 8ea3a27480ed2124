// The RDMA CM back end: addresses are IP:port, the CM resolves the route and carries the
// handshake in its private data (compact form), and moves the QPs through their states.
// Needs Resources opened with for_rdma_cm = true (the CM's own device context).
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "rdmakit/connection.hpp"

struct rdma_event_channel;
struct rdma_cm_event;

namespace rdmakit {

/// Accepts connections made through the RDMA CM (rdma_listen); the handshake travels
/// in the CM's private data.
class CmAcceptor : public detail::LastFailure {
 public:
  /// Listens on address:port (port 0: ephemeral). Throws Error.
  CmAcceptor(std::shared_ptr<Resources> resources, const std::string& address = "0.0.0.0",
             uint16_t port = 0, ConnectionOptions options = {});
  CmAcceptor(const CmAcceptor&) = delete;
  CmAcceptor& operator=(const CmAcceptor&) = delete;
  ~CmAcceptor();

  /// The port it listens on (the ephemeral one when 0 was asked).
  uint16_t port() const noexcept { return port_; }
  /// The CM event channel's fd: readable when a client is waiting (for event loops).
  int fd() const noexcept;

  /// Waits for a connection request and completes it (bounded by options.timeout once the
  /// request is there). Throws Error with the explanation.
  Connection accept();
  /// As accept(), reporting a failure in `ec`.
  Connection accept(std::error_code& ec);
  /// As accept(ec), giving up with Errc::timed_out if no request arrives within `wait`.
  Connection accept_for(std::chrono::milliseconds wait, std::error_code& ec);

  /// For an event loop that must never wait (on fd()): answers the requests that arrived and
  /// completes the connections their clients established since. A connection, or an empty
  /// one (a failed request is remembered: explanation()). At most 64 answered requests wait
  /// for their client at once (more drop the oldest), each for at most options.timeout: a
  /// client that sends its request and vanishes holds nothing up. Call it when ready_fd() is
  /// readable and now and then (expiry needs a call). An acceptor is driven this way or by
  /// accept()/accept_for(), not both: those refuse to run while connections answered here
  /// are in progress. One thread at a time.
  Connection accept_ready();
  /// Readable when accept_ready() has work (the CM event channel's fd, as fd()).
  int ready_fd() const noexcept { return fd(); }

 private:
  struct Request;
  struct Answered;
  bool next_request(Request& request, std::chrono::steady_clock::time_point deadline,
                    std::error_code& ec);
  /// Checks the request's handshake and answers it (rdma_accept, or rdma_reject and null).
  std::unique_ptr<Answered> answer(const Request& request, std::error_code& ec, std::string& why);
  /// The connection of an answered request whose client established it.
  Connection complete(Answered& answered, std::error_code& ec, std::string& why);
  Connection serve_request(std::chrono::milliseconds wait, std::error_code& ec, std::string& why);
  std::shared_ptr<Resources> resources_;
  ConnectionOptions options_;
  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* listener_ = nullptr;
  uint16_t port_ = 0;
  std::mutex accept_mutex_;  ///< one accept at a time: they share the listener's event channel
  std::deque<rdma_cm_event*> waiting_;  ///< requests that arrived while another was served
  std::deque<std::unique_ptr<Answered>> answered_;  ///< accept_ready's, oldest first
};

/// Connects to a CmAcceptor through the RDMA CM (address and route resolution,
/// rdma_connect).
class CmConnector : public detail::LastFailure {
 public:
  /// Connections share `resources` (opened with for_rdma_cm).
  explicit CmConnector(std::shared_ptr<Resources> resources, ConnectionOptions options = {});

  /// Connects to host:port. Throws Error with the explanation.
  Connection connect(const std::string& host, uint16_t port);
  /// As connect(host, port), reporting a failure in `ec`.
  Connection connect(const std::string& host, uint16_t port, std::error_code& ec);

 private:
  std::shared_ptr<Resources> resources_;
  ConnectionOptions options_;
};

static_assert(Acceptor<CmAcceptor>);
static_assert(Connector<CmConnector>);

}  // namespace rdmakit

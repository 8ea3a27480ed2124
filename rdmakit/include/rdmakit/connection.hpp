// Connections: a connected RC QP plus what the handshake negotiated and carried. Two back
// ends set them up with the same interface (see tcp_connection.hpp and cm_connection.hpp):
//
//   auto res = Resources::open();                      // device, PD, one CQ for everything
//   TcpAcceptor acceptor(res, "0.0.0.0", 7471);        // or CmAcceptor
//   Connection c = acceptor.accept();
//
// Connections made by one acceptor or connector share its Resources (the seed's "new
// connection from a parent"): one PD, one CQ, one allocator for any number of peers.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "rdmakit/completion_queue.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/handshake.hpp"
#include "rdmakit/memory_region.hpp"
#include "rdmakit/queue_pair.hpp"

struct rdma_cm_id;
struct rdma_event_channel;

namespace rdmakit {

/// What Resources::open() opens: which device, and the shared CQ.
struct ResourceOptions {
  /// Which device and port (Context::open()).
  OpenOptions device;
  /// Entries of the shared CQ (clamped to the device).
  int cq_depth = 4096;
  /// Create the CQ with a completion channel (for Poller::wait and Asio).
  bool completion_channel = false;
  /// Use the device context RDMA CM hands out (required by CmConnector/CmAcceptor).
  bool for_rdma_cm = false;
};

/// What connections share. Always held through shared_ptr: every Connection keeps it alive.
class Resources {
 public:
  /// Opens the device, a PD and the shared CQ. Throws Error.
  static std::shared_ptr<Resources> open(const ResourceOptions& options = {});

  /// The open device.
  Context context;
  /// The PD every connection's QP and memory belong to.
  ProtectionDomain pd;
  std::unique_ptr<CompletionChannel> channel;  ///< null unless asked for
  /// The CQ every connection's QP completes on.
  CompletionQueue cq;
  /// True when the context is the one the RDMA CM hands out.
  bool for_rdma_cm;

 private:
  struct Token {};

 public:
  /// Internal: use open(). (The token keeps construction to open().)
  Resources(Token, Context ctx, const ResourceOptions& options);
};

/// How a connector or acceptor makes each connection.
struct ConnectionOptions {
  /// QP sizes and timers; clamped to the device (QpBuilder).
  QpCaps caps;
  /// Transport timers of the QP.
  QpTimers timers;
  /// Sent to the peer during the handshake (TCP: up to 64 KiB; RDMA CM: private data limits,
  /// kCmConnectUserData when connecting, kCmAcceptUserData when accepting).
  std::vector<std::byte> user_data;
  /// Bound on each step (TCP connect, address and route resolution, handshake).
  std::chrono::milliseconds timeout{5000};
  /// Attach the QP to this shared receive queue (its receives are posted there, not on the
  /// QP): many connections then share one pool of receive buffers.
  std::shared_ptr<SharedReceiveQueue> srq;
};

/// A connected RC QP with what the handshake negotiated and the peer's user data; keeps
/// its Resources alive. Move-only; destroying it disconnects (RDMA CM) and destroys the QP.
class Connection {
 public:
  /// An empty connection (converts to false).
  Connection() = default;
  /// Takes over the other connection; it becomes empty.
  Connection(Connection&&) noexcept;
  /// Closes this connection, then takes over the other.
  Connection& operator=(Connection&&) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  /// Disconnects and destroys the QP (and the CM id, for RDMA CM connections).
  ~Connection();

  /// True when it holds a connected QP.
  explicit operator bool() const noexcept { return qp_.ready(); }
  /// The connected QP.
  QueuePair& qp() noexcept { return qp_; }
  /// The device, PD and CQ it uses.
  const Resources& resources() const noexcept { return *resources_; }
  /// Shared ownership of the resources.
  const std::shared_ptr<Resources>& shared_resources() const noexcept { return resources_; }
  /// What both sides agreed on (MTU, depths, inline size).
  const Negotiated& negotiated() const noexcept { return negotiated_; }
  /// What the peer offered in the handshake.
  const HandshakeOffer& peer() const noexcept { return peer_; }
  /// The user data the peer sent.
  const std::vector<std::byte>& peer_data() const noexcept { return peer_.user_data; }
  /// "RC QP 0x12 <-> 0x34, MTU 4096, rd_atomic 16, inline 64, via tcp 10.0.0.2:7471".
  std::string summary() const;

  /// Internal: assembled by the back ends.
  Connection(std::shared_ptr<Resources> resources, QueuePair qp, HandshakeOffer peer,
             Negotiated negotiated, std::string via, rdma_cm_id* cm_id = nullptr,
             rdma_event_channel* cm_channel = nullptr);

 private:
  void release() noexcept;
  std::shared_ptr<Resources> resources_;
  /// RDMA CM back end: the id is disconnected and destroyed after the QP, then its channel.
  rdma_cm_id* cm_id_ = nullptr;
  rdma_event_channel* cm_channel_ = nullptr;
  QueuePair qp_;
  HandshakeOffer peer_;
  Negotiated negotiated_;
  std::string via_;
};

/// The common interface of both back ends.
template <typename T>
concept Acceptor = requires(T acceptor, std::error_code& ec) {
  { acceptor.accept() } -> std::same_as<Connection>;
  { acceptor.accept(ec) } -> std::same_as<Connection>;
  { acceptor.port() } -> std::convertible_to<uint16_t>;
};

template <typename T>
concept Connector = requires(T connector, const std::string& host, uint16_t port,
                             std::error_code& ec) {
  { connector.connect(host, port) } -> std::same_as<Connection>;
  { connector.connect(host, port, ec) } -> std::same_as<Connection>;
};

namespace detail {

/// The last failure of an acceptor or connector, in words (what explanation() returns), and
/// the throwing form of their error_code calls.
class LastFailure {
 public:
  /// Why the last failed accept or connect failed ("" after a success).
  std::string explanation() const {
    std::lock_guard lock(mutex_);
    return why_;
  }

 protected:
  void remember(std::string why) {
    std::lock_guard lock(mutex_);
    why_ = std::move(why);
  }
  /// Runs attempt(ec); throws Error "<context>: <explanation>" if it failed.
  template <typename Attempt>
  Connection or_throw(Attempt&& attempt, const std::string& context) {
    std::error_code ec;
    Connection c = attempt(ec);
    if (ec) throw_error(ec, context + ": " + explanation());
    return c;
  }

 private:
  mutable std::mutex mutex_;
  std::string why_;
};

/// This side's offer for `qp`, from the resources and options.
HandshakeOffer make_offer(const Resources& resources, const QueuePair& qp,
                          const ConnectionOptions& options);
QpBuilder builder_for(const Resources& resources, const ConnectionOptions& options);
}  // namespace detail

}  // namespace rdmakit

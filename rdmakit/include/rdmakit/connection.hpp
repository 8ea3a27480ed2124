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

struct ResourceOptions {
  OpenOptions device;
  int cq_depth = 4096;
  /// Create the CQ with a completion channel (for Poller::wait and Asio).
  bool completion_channel = false;
  /// Use the device context RDMA CM hands out (required by CmConnector/CmAcceptor).
  bool for_rdma_cm = false;
};

/// What connections share. Always held through shared_ptr: every Connection keeps it alive.
class Resources {
 public:
  static std::shared_ptr<Resources> open(const ResourceOptions& options = {});

  Context context;
  ProtectionDomain pd;
  std::unique_ptr<CompletionChannel> channel;  ///< null unless asked for
  CompletionQueue cq;
  bool for_rdma_cm;

 private:
  struct Token {};

 public:
  Resources(Token, Context ctx, const ResourceOptions& options);
};

struct ConnectionOptions {
  /// QP sizes and timers; clamped to the device (QpBuilder).
  QpCaps caps;
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

class Connection {
 public:
  Connection() = default;
  Connection(Connection&&) noexcept;
  Connection& operator=(Connection&&) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  explicit operator bool() const noexcept { return qp_.ready(); }
  QueuePair& qp() noexcept { return qp_; }
  const Resources& resources() const noexcept { return *resources_; }
  const std::shared_ptr<Resources>& shared_resources() const noexcept { return resources_; }
  const Negotiated& negotiated() const noexcept { return negotiated_; }
  const HandshakeOffer& peer() const noexcept { return peer_; }
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

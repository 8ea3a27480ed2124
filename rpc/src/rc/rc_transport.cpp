// rc://HOST:PORT (connections through RDMA CM) and rc+tcp://HOST:PORT (rdmakit's TCP
// exchange of QP addresses): sessions over RC queue pairs, all of an endpoint's attached to
// one shared receive queue and one completion queue (rc_device.hpp). Each side offers its
// limits in the connection handshake; the session takes the smaller window and message
// limit, and each side sizes its own receive rings.
#include <cstring>
#include <memory>

#include "core/engine.hpp"
#include "core/transports.hpp"
#include "rc/rc_link.hpp"
#include "rdmakit/cm_connection.hpp"
#include "rdmakit/rpc/status.hpp"
#include "rdmakit/tcp_connection.hpp"
#include "ring/segment.hpp"
#include "tcp/sockets.hpp"

namespace rdmakit::rpc::detail {
namespace {

using rc::LimitsOffer;
using rc::RcDevice;
using rc::RcLink;

// Send queue per session: a flush posts at most a handful of work requests, and pulls one
// each; completions are asked for every half queue.
constexpr uint32_t kSendDepth = 256;
constexpr uint32_t kMaxRingBytes = 1u << 30;
// The acceptor's bound on one connection's handshake, which moves along with the server's
// polls (accept_ready), never waiting.
constexpr auto kAcceptHandshakeTimeout = std::chrono::milliseconds(2000);

uint32_t ring_bytes_of(const Options& options) noexcept {
  return std::min(Segment::round_ring_bytes(options.ring_bytes), kMaxRingBytes);
}

std::vector<std::byte> offer_of(const Options& options) {
  const LimitsOffer offer{
      rc::kMagic, rc::kVersion, options.window, options.max_message_bytes, ring_bytes_of(options),
      0};
  std::vector<std::byte> bytes(sizeof offer);
  std::memcpy(bytes.data(), &offer, sizeof offer);
  return bytes;
}

/// The session over `connection`, from both sides' offers.
std::unique_ptr<RcLink> open_link(const std::shared_ptr<RcDevice>& device, Connection connection,
                                  const Options& options, std::error_code& error) {
  LimitsOffer theirs{};
  const std::vector<std::byte>& data = connection.peer_data();
  if (data.size() < sizeof theirs) {
    error = make_error_code(Errc::protocol_error);
    return nullptr;
  }
  std::memcpy(&theirs, data.data(), sizeof theirs);
  const bool power_of_two = (theirs.ring_bytes & (theirs.ring_bytes - 1)) == 0;
  if (theirs.magic != rc::kMagic || theirs.version != rc::kVersion || theirs.window == 0 ||
      !power_of_two || theirs.ring_bytes < 4096 || theirs.ring_bytes > kMaxRingBytes) {
    error = make_error_code(Errc::protocol_error);
    return nullptr;
  }
  RcLink::Setup setup;
  setup.limits.window = std::min(options.window, theirs.window);
  setup.limits.max_message_bytes = std::min(options.max_message_bytes, theirs.max_message_bytes);
  setup.ring_bytes = ring_bytes_of(options);
  setup.peer_ring_bytes = theirs.ring_bytes;
  if (options.default_timeout.count() > 0) setup.grant_lifetime = options.default_timeout;
  return RcLink::open(device, std::move(connection), setup, error);
}

/// The endpoint's device for this back end, opened on first use.
std::shared_ptr<RcDevice> device_of(Engine& engine, bool rdma_cm, std::error_code& error) {
  static const char cm_key = 0, tcp_key = 0;
  std::shared_ptr<void>& slot = engine.transport_state(rdma_cm ? &cm_key : &tcp_key);
  if (!slot) slot = RcDevice::open(rdma_cm, error);
  return std::static_pointer_cast<RcDevice>(slot);
}

ConnectionOptions connection_options(const RcDevice& device, const Options& options,
                                     std::chrono::milliseconds timeout) {
  ConnectionOptions o = device.connection_options(kSendDepth);
  o.user_data = offer_of(options);
  o.timeout = timeout;
  return o;
}

template <typename AcceptorType>
class RcListener final : public Listener {
 public:
  RcListener(std::shared_ptr<RcDevice> device, std::unique_ptr<AcceptorType> acceptor,
             const Options& options, std::string url)
      : device_(std::move(device)),
        acceptor_(std::move(acceptor)),
        options_(options),
        url_(std::move(url)) {}

  std::unique_ptr<Link> accept() override {
    // Never waits for a client: handshakes move as far as what has arrived allows.
    Connection connection = acceptor_->accept_ready();
    if (!connection) return nullptr;
    std::error_code ec;
    return open_link(device_, std::move(connection), options_, ec);  // null: dropped
  }
  int wait_fd() const override { return acceptor_->ready_fd(); }
  const std::string& url() const override { return url_; }

 private:
  std::shared_ptr<RcDevice> device_;
  std::unique_ptr<AcceptorType> acceptor_;
  Options options_;
  std::string url_;
};

/// HOST:PORT of `address`, and the endpoint's device; null with `error` set on failure.
std::shared_ptr<RcDevice> resolve(const std::string& address, Engine& engine, bool rdma_cm,
                                  HostPort& where, std::error_code& error) {
  std::optional<HostPort> parsed = parse_host_port(address);
  if (!parsed) {
    error = make_error_code(Errc::bad_url);
    return nullptr;
  }
  where = std::move(*parsed);
  return device_of(engine, rdma_cm, error);
}

uint16_t port_of(const HostPort& where) {
  return static_cast<uint16_t>(std::stoul(where.port));  // checked by parse_host_port
}

template <typename AcceptorType>
std::unique_ptr<Listener> listen_with(const std::string& address, Engine& engine, bool rdma_cm,
                                      const char* scheme, std::error_code& error) {
  HostPort where;
  std::shared_ptr<RcDevice> device = resolve(address, engine, rdma_cm, where, error);
  if (!device) return nullptr;
  try {
    auto acceptor = std::make_unique<AcceptorType>(
        device->resources(), where.host, port_of(where),
        connection_options(*device, engine.options(), kAcceptHandshakeTimeout));
    std::string url =
        std::string(scheme) + "://" + where.written_host + ":" + std::to_string(acceptor->port());
    return std::make_unique<RcListener<AcceptorType>>(device, std::move(acceptor), engine.options(),
                                                      std::move(url));
  } catch (const Error& e) {
    error = e.code();
    return nullptr;
  }
}

template <typename ConnectorType>
std::unique_ptr<Link> connect_with(const std::string& address, Engine& engine, bool rdma_cm,
                                   std::error_code& error) {
  HostPort where;
  std::shared_ptr<RcDevice> device = resolve(address, engine, rdma_cm, where, error);
  if (!device) return nullptr;
  ConnectorType connector(
      device->resources(),
      connection_options(*device, engine.options(), engine.options().connect_timeout));
  const auto deadline = std::chrono::steady_clock::now() + engine.options().connect_timeout;
  Connection connection = connector.connect(where.host, port_of(where), error);
  if (!connection) return nullptr;
  std::unique_ptr<RcLink> link = open_link(device, std::move(connection), engine.options(), error);
  if (link && !link->await_peer(deadline)) {
    error = link->failure() ? link->failure() : make_error_code(Errc::session_closed);
    return nullptr;
  }
  return link;
}

}  // namespace

std::unique_ptr<Listener> listen_rc(const std::string& address, Engine& engine,
                                    std::error_code& error) {
  return listen_with<CmAcceptor>(address, engine, true, "rc", error);
}
std::unique_ptr<Link> connect_rc(const std::string& address, Engine& engine,
                                 std::error_code& error) {
  return connect_with<CmConnector>(address, engine, true, error);
}
std::unique_ptr<Listener> listen_rc_tcp(const std::string& address, Engine& engine,
                                        std::error_code& error) {
  return listen_with<TcpAcceptor>(address, engine, false, "rc+tcp", error);
}
std::unique_ptr<Link> connect_rc_tcp(const std::string& address, Engine& engine,
                                     std::error_code& error) {
  return connect_with<TcpConnector>(address, engine, false, error);
}

}  // namespace rdmakit::rpc::detail

// ud://HOST:PORT: sessions over the endpoint's one UD queue pair (ud_device.hpp), each a
// byte stream of datagrams (ud_stream.hpp) carrying frames (stream/stream_link.hpp). A
// session is set up over a short TCP connection to HOST:PORT: the client sends its hello
// (where its queue pair is, its session number and limits), the server admits it or says
// why not in its own hello, and the connection closes; from then on only datagrams flow.
// Each side takes the smaller window and message limit. The server never blocks on a
// client: one whose hello has not arrived waits aside (tcp/hello_acceptor.hpp).
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "core/engine.hpp"
#include "core/transports.hpp"
#include "rdmakit/rpc/status.hpp"
#include "stream/stream_link.hpp"
#include "tcp/hello_acceptor.hpp"
#include "tcp/sockets.hpp"
#include "ud/ud_stream.hpp"

namespace rdmakit::rpc::detail {
namespace {

using ud::UdDevice;
using ud::UdStream;

// How long a connected client may take to send its hello; it waits aside meanwhile.
constexpr auto kHelloTimeout = std::chrono::milliseconds(2000);
// Clients refused per accept() call, so that a flood of them cannot hold up the server.
constexpr int kRefusalsPerCall = 16;
// The silence after which a peer that acknowledges nothing is gone, when the options set
// none (a UD peer gives no other sign of its death).
constexpr std::chrono::milliseconds kDefaultSilence{30'000};

std::shared_ptr<UdDevice> device_of(Engine& engine, std::error_code& error) {
  static const char key = 0;
  std::shared_ptr<void>& slot = engine.transport_state(&key);
  if (!slot) slot = UdDevice::open(error);
  return std::static_pointer_cast<UdDevice>(slot);
}

std::chrono::milliseconds silence_of(const Options& options) {
  return options.peer_timeout.count() > 0 ? options.peer_timeout : kDefaultSilence;
}

ud::Hello own_hello(const UdDevice& device, const Options& options, uint32_t session,
                    uint32_t status) {
  ud::Hello h{};
  h.magic = ud::kMagic;
  h.version = ud::kVersion;
  const QpAddress address = device.address();
  std::memcpy(h.gid, address.gid.raw, sizeof h.gid);
  h.qpn = address.qpn;
  h.qkey = address.qkey;
  h.session = session;
  h.window = options.window;
  h.max_message_bytes = options.max_message_bytes;
  h.max_payload = device.max_payload();
  h.status = status;
  return h;
}

bool well_formed(const ud::Hello& h) noexcept {
  return h.magic == ud::kMagic && h.version == ud::kVersion && h.window > 0 &&
         h.max_payload >= 64 && h.max_payload <= 65535;
}

/// The session over `stream`, now that the peer's hello is known.
std::unique_ptr<Link> open_link(std::unique_ptr<UdStream> stream, const ud::Hello& peer,
                                const Options& options) {
  stream->connect(peer);
  const LinkLimits limits{std::min(options.window, peer.window),
                          std::min(options.max_message_bytes, peer.max_message_bytes)};
  return std::make_unique<StreamLink>(std::move(stream), limits, StreamLink::AwaitedHello{});
}

class UdListener final : public Listener {
 public:
  UdListener(std::shared_ptr<UdDevice> device, std::unique_ptr<HelloAcceptor> acceptor,
             const Options& options, std::string url)
      : device_(std::move(device)),
        acceptor_(std::move(acceptor)),
        options_(options),
        url_(std::move(url)) {}

  std::unique_ptr<Link> accept() override {
    for (int refused = 0; refused < kRefusalsPerCall; ++refused) {
      ud::Hello peer{};
      const int fd = acceptor_->next(std::as_writable_bytes(std::span(&peer, 1)));
      if (fd < 0) break;
      std::unique_ptr<Link> link = admit(fd, peer);
      close(fd);
      if (link) return link;
    }
    return nullptr;
  }
  int wait_fd() const override { return acceptor_->wait_fd(); }
  const std::string& url() const override { return url_; }

 private:
  /// The session of the client whose hello `peer` arrived on `fd`, which takes our own
  /// hello (or why it is refused); nullptr if it is not admitted.
  std::unique_ptr<Link> admit(int fd, const ud::Hello& peer) {
    if (!well_formed(peer)) return nullptr;
    std::error_code error;
    std::unique_ptr<UdStream> stream = UdStream::open(device_, silence_of(options_), error);
    const auto status = static_cast<uint32_t>(stream ? 0 : error.value());
    const ud::Hello own = own_hello(*device_, options_, stream ? stream->session() : 0, status);
    // The socket's send buffer is empty: the hello goes in whole or the client is gone.
    if (::send(fd, &own, sizeof own, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof own) || !stream)
      return nullptr;
    return open_link(std::move(stream), peer, options_);
  }

  std::shared_ptr<UdDevice> device_;
  std::unique_ptr<HelloAcceptor> acceptor_;
  Options options_;
  std::string url_;
};

}  // namespace

std::unique_ptr<Listener> listen_ud(const std::string& host_port, Engine& engine,
                                    std::error_code& error) {
  HostPort where;
  const Addresses addresses = resolve(host_port, true, where, error);
  if (!addresses) return nullptr;
  std::shared_ptr<UdDevice> device = device_of(engine, error);
  if (!device) return nullptr;
  const int fd = listen_on(addresses, error);
  if (fd < 0) return nullptr;
  const uint16_t port = bound_port(fd);
  std::unique_ptr<HelloAcceptor> acceptor =
      HelloAcceptor::open(fd, sizeof(ud::Hello), {}, kHelloTimeout, error);
  if (!acceptor) return nullptr;
  return std::make_unique<UdListener>(std::move(device), std::move(acceptor), engine.options(),
                                      "ud://" + where.written_host + ":" + std::to_string(port));
}

std::unique_ptr<Link> connect_ud(const std::string& host_port, Engine& engine,
                                 std::error_code& error) {
  HostPort where;
  const Addresses addresses = resolve(host_port, false, where, error);
  if (!addresses) return nullptr;
  std::shared_ptr<UdDevice> device = device_of(engine, error);
  if (!device) return nullptr;
  const Options& options = engine.options();
  const Clock::time_point deadline = Clock::now() + options.connect_timeout;
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    const int fd = connect_socket(*a, deadline, error);
    if (fd < 0) {
      if (error == std::errc::timed_out) return nullptr;
      continue;
    }
    std::unique_ptr<UdStream> stream = UdStream::open(device, silence_of(options), error);
    ud::Hello peer{};
    const ud::Hello own = stream ? own_hello(*device, options, stream->session(), 0) : ud::Hello{};
    const bool answered =
        stream && send_all(fd, std::as_bytes(std::span(&own, 1)), deadline, error) &&
        receive_all(fd, std::as_writable_bytes(std::span(&peer, 1)), deadline, error);
    close(fd);
    if (!answered) return nullptr;
    if (!well_formed(peer)) {
      error = make_error_code(Errc::protocol_error);
      return nullptr;
    }
    if (peer.status != 0) {
      error = make_error_code(peer.status == static_cast<uint32_t>(Errc::too_many_sessions)
                                  ? Errc::too_many_sessions
                                  : Errc::protocol_error);
      return nullptr;
    }
    error.clear();
    return open_link(std::move(stream), peer, options);
  }
  return nullptr;
}

}  // namespace rdmakit::rpc::detail

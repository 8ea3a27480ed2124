#include "rdmakit/tcp_connection.hpp"

#include <endian.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "deadline_socket.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit {
namespace {

using detail::Deadline;

// Frames of the TCP exchange: kind (1 byte), length (4 bytes LE), payload.
enum class Frame : uint8_t { offer = 'O', reject = 'R', ready = 'K' };
constexpr uint32_t kMaxFrame = 64 * 1024 + 256;  // an offer with the largest user data
static_assert(kMaxFrame >= 0xffff + 58, "a frame holds an offer with 64 KiB of user data");

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

bool send_frame(int fd, Frame kind, std::span<const std::byte> payload, Deadline deadline,
                std::error_code& ec) {
  std::byte header[5];
  header[0] = static_cast<std::byte>(kind);
  const uint32_t len = htole32(static_cast<uint32_t>(payload.size()));
  std::memcpy(header + 1, &len, sizeof len);
  return detail::send_all(fd, header, sizeof header, deadline, ec) &&
         detail::send_all(fd, payload.data(), payload.size(), deadline, ec);
}

bool recv_frame(int fd, Frame& kind, std::vector<std::byte>& payload, Deadline deadline,
                std::error_code& ec) {
  std::byte header[5];
  if (!detail::recv_exact(fd, header, sizeof header, deadline, ec)) return false;
  uint32_t len;
  std::memcpy(&len, header + 1, sizeof len);
  len = le32toh(len);
  kind = static_cast<Frame>(header[0]);
  if (len > kMaxFrame || (kind != Frame::offer && kind != Frame::reject && kind != Frame::ready)) {
    ec = make_error_code(Errc::handshake_malformed);
    return false;
  }
  payload.resize(len);
  return detail::recv_exact(fd, payload.data(), len, deadline, ec);
}

// A reject frame: the error (1 byte, an Errc) and the explanation.
std::vector<std::byte> reject_payload(std::error_code ec, const std::string& why) {
  std::vector<std::byte> out(1 + why.size());
  out[0] = static_cast<std::byte>(ec.category() == rdmakit_category() ? ec.value()
                                                                      : int(Errc::rejected));
  std::memcpy(out.data() + 1, why.data(), why.size());
  return out;
}

std::error_code read_reject(std::span<const std::byte> payload, std::string& why) {
  if (payload.empty()) return make_error_code(Errc::rejected);
  why = "the peer refused: " +
        std::string(reinterpret_cast<const char*>(payload.data()) + 1, payload.size() - 1);
  const int code = static_cast<int>(payload[0]);
  return code >= int(Errc::handshake_malformed) && code <= int(Errc::handshake_mismatch)
             ? make_error_code(static_cast<Errc>(code))
             : make_error_code(Errc::rejected);
}

// The part both roles share once the offers are known: check, refuse or connect the QP and
// wait until the peer's QP is ready too (so neither side sends to a QP not yet in RTR).
Connection finish_handshake(int fd, const std::shared_ptr<Resources>& resources, QueuePair qp,
                            const HandshakeOffer& ours, HandshakeOffer theirs, Deadline deadline,
                            std::error_code& ec, std::string& why) {
  ec = check_compatible(ours, theirs, why);
  if (ec) {
    std::error_code ignored;
    send_frame(fd, Frame::reject, reject_payload(ec, why), deadline, ignored);
    return {};
  }
  const Negotiated negotiated = negotiate(ours, theirs);
  qp.connect(theirs.address, negotiated.path, ec);
  if (ec) {
    why = "connecting the QP: " + ec.message();
    return {};
  }
  Frame kind{};
  std::vector<std::byte> payload;
  if (!send_frame(fd, Frame::ready, {}, deadline, ec) ||
      !recv_frame(fd, kind, payload, deadline, ec)) {
    why = "waiting for the peer's QP: " + ec.message();
    return {};
  }
  if (kind == Frame::reject) {
    ec = read_reject(payload, why);
    return {};
  }
  if (kind != Frame::ready) {
    ec = make_error_code(Errc::handshake_malformed);
    why = "the peer sent an unexpected frame instead of ready";
    return {};
  }
  return Connection(resources, std::move(qp), std::move(theirs), negotiated,
                    "tcp " + detail::peer_name(fd));
}

// Reads and decodes the peer's offer (or its refusal).
bool receive_offer(int fd, HandshakeOffer& theirs, Deadline deadline, std::error_code& ec,
                   std::string& why) {
  Frame kind{};
  std::vector<std::byte> payload;
  if (!recv_frame(fd, kind, payload, deadline, ec)) {
    why = "reading the peer's offer: " + ec.message();
    return false;
  }
  if (kind == Frame::reject) {
    ec = read_reject(payload, why);
    return false;
  }
  ec = kind == Frame::offer ? decode(payload, OfferForm::full, theirs)
                            : make_error_code(Errc::handshake_malformed);
  if (ec == Errc::handshake_version) {
    HandshakeOffer ours;
    check_compatible(ours, theirs, why);
  } else if (ec) {
    why = "the peer's offer is not an rdmakit handshake";
  }
  return !ec;
}

std::chrono::milliseconds no_wait_limit() {
  return std::chrono::milliseconds::max();
}

}  // namespace

TcpAcceptor::TcpAcceptor(std::shared_ptr<Resources> resources, const std::string& address,
                         uint16_t port, ConnectionOptions options)
    : resources_(std::move(resources)), options_(std::move(options)) {
  fd_ = detail::tcp_listen(address, port, 128);
  port_ = detail::local_port(fd_);
}

TcpAcceptor::~TcpAcceptor() {
  close(fd_);
}

Connection TcpAcceptor::accept_for(std::chrono::milliseconds wait, std::error_code& ec) {
  std::string why;
  Connection result;
  const Deadline wait_until =
      wait == no_wait_limit() ? Deadline::max() : std::chrono::steady_clock::now() + wait;
  // Another thread may take the client this one was woken for: wait again.
  int client = -1;
  while (client < 0) {
    if (!detail::wait_readable(fd_, wait_until, ec)) {
      why = "waiting for a client: " + ec.message();
      break;
    }
    client = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0 && errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
      ec = verbs_error(errno);
      why = "accept: " + ec.message();
      break;
    }
  }
  if (client >= 0) {
    Fd guard{client};
    const Deadline deadline = std::chrono::steady_clock::now() + options_.timeout;
    HandshakeOffer theirs;
    if (receive_offer(client, theirs, deadline, ec, why)) {
      QueuePair qp = detail::builder_for(*resources_, options_).build();
      const HandshakeOffer ours = detail::make_offer(*resources_, qp, options_);
      std::string refusal;
      if (check_compatible(ours, theirs, refusal)) {
        result = finish_handshake(client, resources_, std::move(qp), ours, std::move(theirs),
                                  deadline, ec, why);
      } else if (send_frame(client, Frame::offer, encode(ours, OfferForm::full), deadline, ec)) {
        result = finish_handshake(client, resources_, std::move(qp), ours, std::move(theirs),
                                  deadline, ec, why);
      } else {
        why = "sending the offer: " + ec.message();
      }
    } else if (ec == Errc::handshake_version) {
      std::error_code ignored;
      send_frame(client, Frame::reject, reject_payload(ec, why), deadline, ignored);
    }
  }
  remember(std::move(why));
  return result;
}

Connection TcpAcceptor::accept(std::error_code& ec) {
  return accept_for(no_wait_limit(), ec);
}

Connection TcpAcceptor::accept() {
  return or_throw([this](std::error_code& ec) { return accept(ec); },
                  "TcpAcceptor::accept on port " + std::to_string(port_));
}

TcpConnector::TcpConnector(std::shared_ptr<Resources> resources, ConnectionOptions options)
    : resources_(std::move(resources)), options_(std::move(options)) {}

Connection TcpConnector::connect(const std::string& host, uint16_t port, std::error_code& ec) {
  std::string why;
  Connection result;
  const Deadline deadline = std::chrono::steady_clock::now() + options_.timeout;
  const int fd = detail::tcp_connect(host, port, deadline, ec);
  if (fd < 0) {
    why = "TCP connect: " + ec.message();
  } else {
    Fd guard{fd};
    QueuePair qp = detail::builder_for(*resources_, options_).build();
    const HandshakeOffer ours = detail::make_offer(*resources_, qp, options_);
    HandshakeOffer theirs;
    if (!send_frame(fd, Frame::offer, encode(ours, OfferForm::full), deadline, ec))
      why = "sending the offer: " + ec.message();
    else if (receive_offer(fd, theirs, deadline, ec, why))
      result = finish_handshake(fd, resources_, std::move(qp), ours, std::move(theirs), deadline,
                                ec, why);
  }
  remember(std::move(why));
  return result;
}

Connection TcpConnector::connect(const std::string& host, uint16_t port) {
  return or_throw([&](std::error_code& ec) { return connect(host, port, ec); },
                  "TcpConnector::connect to " + host + ":" + std::to_string(port));
}

}  // namespace rdmakit

#include "rdmakit/tcp_connection.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "accept_ready_bounds.hpp"
#include "deadline_socket.hpp"
#include "rdmakit/error.hpp"
#include "tcp_frames.hpp"
#include "tcp_server_handshake.hpp"

namespace rdmakit {
namespace {

using detail::Deadline;

using detail::Frame;
using detail::read_reject;
using detail::recv_frame;
using detail::reject_payload;
using detail::send_frame;

// Adds `fd` to (or, with EPOLL_CTL_MOD, changes it in) the wait set `epoll_fd`.
bool watch(int epoll_fd, int op, int fd, uint32_t events) {
  epoll_event event{};
  event.events = events;
  event.data.fd = fd;
  return epoll_ctl(epoll_fd, op, fd, &event) == 0;
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// The connecting side once the offers are known: check, refuse or connect the QP and wait
// until the peer's QP is ready too (so neither side sends to a QP not yet in RTR). The
// accepting side does the same steps without waiting (tcp_server_handshake.hpp).
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
  ec = detail::read_offer(kind, payload, theirs, why);
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
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0 || !watch(epoll_fd_, EPOLL_CTL_ADD, fd_, EPOLLIN)) {
    const int saved = errno;
    if (epoll_fd_ >= 0) close(epoll_fd_);
    close(fd_);
    throw_error(verbs_error(saved), "TcpAcceptor: the wait set of port " + std::to_string(port_));
  }
}

TcpAcceptor::~TcpAcceptor() {
  handshakes_.clear();
  if (epoll_fd_ >= 0) close(epoll_fd_);
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
    detail::ServerHandshake h(client, std::chrono::steady_clock::now() + options_.timeout);
    for (h.advance(resources_, options_); h.state() != detail::ServerHandshake::State::done &&
                                          h.state() != detail::ServerHandshake::State::failed;
         h.advance(resources_, options_)) {
      if (!detail::wait_for(client, h.wants_write() ? POLLOUT : POLLIN, h.deadline(), ec))
        h.fail(ec, "waiting for the client: " + ec.message());
    }
    if (h.state() == detail::ServerHandshake::State::done) {
      result = h.take(resources_);
    } else {
      ec = h.error();
      why = h.why();
    }
  }
  remember(std::move(why));
  return result;
}

void TcpAcceptor::forget(size_t index) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, handshakes_[index]->fd(), nullptr);
  handshakes_.erase(handshakes_.begin() + static_cast<std::ptrdiff_t>(index));
}

Connection TcpAcceptor::accept_ready() {
  using State = detail::ServerHandshake::State;
  const auto now = std::chrono::steady_clock::now();
  for (int i = 0; i < detail::kArrivalsPerCall; ++i) {
    const int client = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break;  // none waits (or out of descriptors: the backlog keeps them)
    }
    if (handshakes_.size() == detail::kMostConnectionsInProgress) {
      remember("dropped the oldest unfinished handshake for a new client");
      forget(0);
    }
    watch(epoll_fd_, EPOLL_CTL_ADD, client, EPOLLIN);
    handshakes_.push_back(
        std::make_unique<detail::ServerHandshake>(client, now + options_.timeout));
  }
  for (size_t i = 0; i < handshakes_.size();) {
    detail::ServerHandshake& h = *handshakes_[i];
    if (now >= h.deadline())
      h.fail(make_error_code(Errc::timed_out), "the client did not finish its handshake in time");
    else
      h.advance(resources_, options_);
    if (h.state() == State::done) {
      Connection connection = h.take(resources_);
      forget(i);
      remember("");
      return connection;
    }
    if (h.state() == State::failed) {
      remember(h.why());
      forget(i);
      continue;
    }
    watch(epoll_fd_, EPOLL_CTL_MOD, h.fd(), h.wants_write() ? EPOLLOUT : EPOLLIN);
    ++i;
  }
  return {};
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

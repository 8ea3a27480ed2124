#include "rdmakit/cm_connection.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "accept_ready_bounds.hpp"
#include "deadline_socket.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit {
namespace detail {

struct CmQueuePairs {
  // The CM moved the QP to RTS when the connection was established.
  static void mark_ready(QueuePair& qp) noexcept { qp.ready_ = true; }
};

}  // namespace detail

namespace {

using detail::Deadline;
// Private data of a reject: the Errc (1 byte) and the explanation, within the REJ limit.
constexpr size_t kRejectPrivateData = 148;

// The next CM event on `channel`, or null with `ec` set (timed_out at the deadline).
rdma_cm_event* next_event(rdma_event_channel* channel, Deadline deadline, std::error_code& ec) {
  if (!detail::wait_readable(channel->fd, deadline, ec)) return nullptr;
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) {
    ec = verbs_error(errno);
    return nullptr;
  }
  return event;
}

GidEntry gid_of(const sockaddr* addr) {
  GidEntry gid;
  gid.type = GidType::roce_v2;
  gid.gid.raw[10] = 0xff;
  gid.gid.raw[11] = 0xff;
  std::memcpy(gid.gid.raw + 12, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, 4);
  return gid;
}

std::vector<std::byte> private_data(const rdma_cm_event* event) {
  const auto* p = static_cast<const std::byte*>(event->param.conn.private_data);
  return p ? std::vector<std::byte>(p, p + event->param.conn.private_data_len)
           : std::vector<std::byte>();
}

// The private data of a connection request. When the copy fails (out of memory) the client
// is refused, and its event acknowledged and its id destroyed, before the failure goes on:
// an event left unacknowledged would block the channel's destruction.
std::vector<std::byte> request_data_or_refuse(rdma_cm_event* event) {
  try {
    return private_data(event);
  } catch (...) {
    rdma_cm_id* id = event->id;
    rdma_ack_cm_event(event);
    rdma_reject(id, nullptr, 0);
    rdma_destroy_id(id);
    throw;
  }
}

rdma_conn_param conn_param(const std::vector<std::byte>& data, const QueuePair& qp) {
  rdma_conn_param param{};
  param.private_data = data.data();
  param.private_data_len = static_cast<uint8_t>(data.size());
  param.responder_resources = qp.caps().rd_atomic;
  param.initiator_depth = qp.caps().rd_atomic;
  param.retry_count = qp.timers().retry_count;
  param.rnr_retry_count = qp.timers().rnr_retry;
  return param;
}

std::vector<std::byte> reject_data(std::error_code ec, const std::string& why) {
  std::vector<std::byte> out(1 + std::min(why.size(), kRejectPrivateData - 1));
  out[0] = static_cast<std::byte>(ec.value());
  std::memcpy(out.data() + 1, why.data(), out.size() - 1);
  return out;
}

std::error_code reject_reason(const std::vector<std::byte>& data, std::string& why) {
  if (data.empty() || int(data[0]) < int(Errc::handshake_malformed) ||
      int(data[0]) > int(Errc::handshake_mismatch)) {
    why = "the peer rejected the connection";
    return make_error_code(Errc::rejected);
  }
  std::string text(reinterpret_cast<const char*>(data.data()) + 1, data.size() - 1);
  text.resize(std::strlen(text.c_str()));  // the CM may pad with zeros
  why = "the peer refused: " + text;
  return make_error_code(static_cast<Errc>(int(data[0])));
}

std::string describe_event(rdma_cm_event_type type, int status) {
  return std::string(rdma_event_str(type)) +
         (status ? " (status " + std::to_string(status) + ")" : "");
}

struct IdGuard {
  rdma_cm_id* id;
  rdma_event_channel* channel;
  ~IdGuard() {
    if (id) rdma_destroy_id(id);
    if (channel) rdma_destroy_event_channel(channel);
  }
};

}  // namespace

struct CmAcceptor::Request {
  rdma_cm_id* id = nullptr;
  std::vector<std::byte> data;
  uint32_t qpn = 0;  // the client's QP, as the CM reports it
};

CmAcceptor::CmAcceptor(std::shared_ptr<Resources> resources, const std::string& address,
                       uint16_t port, ConnectionOptions options)
    : resources_(std::move(resources)), options_(std::move(options)) {
  RDMAKIT_REQUIRE(resources_->for_rdma_cm,
                  "CmAcceptor needs Resources opened with for_rdma_cm = true");
  channel_ = rdma_create_event_channel();
  if (!channel_) throw_verbs_error("rdma_create_event_channel", errno, "CmAcceptor");
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  const std::string where = address + ":" + std::to_string(port);
  if (inet_pton(AF_INET, address.c_str(), &sin.sin_addr) != 1) {
    rdma_destroy_event_channel(channel_);
    throw Error(verbs_error(EINVAL), "not an IPv4 address: " + address);
  }
  if (rdma_create_id(channel_, &listener_, nullptr, RDMA_PS_TCP) != 0 ||
      rdma_bind_addr(listener_, reinterpret_cast<sockaddr*>(&sin)) != 0 ||
      rdma_listen(listener_, 128) != 0) {
    const int err = errno;
    if (listener_) rdma_destroy_id(listener_);
    rdma_destroy_event_channel(channel_);
    throw_verbs_error("rdma_bind_addr/rdma_listen", err, where);
  }
  port_ = ntohs(rdma_get_src_port(listener_));
}

CmAcceptor::~CmAcceptor() {
  answered_.clear();  // their ids before the channel they report to
  for (rdma_cm_event* event : waiting_) {
    rdma_cm_id* id = event->id;
    rdma_ack_cm_event(event);
    rdma_reject(id, nullptr, 0);
    rdma_destroy_id(id);
  }
  rdma_destroy_id(listener_);
  rdma_destroy_event_channel(channel_);
}

int CmAcceptor::fd() const noexcept {
  return channel_->fd;
}

bool CmAcceptor::next_request(Request& request, Deadline deadline, std::error_code& ec) {
  rdma_cm_event* event = nullptr;
  if (!waiting_.empty()) {
    event = waiting_.front();
    waiting_.pop_front();
  }
  while (!event) {
    event = next_event(channel_, deadline, ec);
    if (!event) return false;
    if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) break;
    rdma_ack_cm_event(event);  // e.g. a request that gave up before we got to it
    event = nullptr;
  }
  request = {event->id, request_data_or_refuse(event), event->param.conn.qp_num};
  rdma_ack_cm_event(event);
  return true;
}

Connection CmAcceptor::accept_for(std::chrono::milliseconds wait, std::error_code& ec) {
  std::lock_guard lock(accept_mutex_);
  // Its wait would take (and drop) the events of the connections accept_ready answered.
  RDMAKIT_REQUIRE(answered_.empty(),
                  "CmAcceptor: accept()/accept_for() while accept_ready() has connections in "
                  "progress (drive an acceptor one way)");
  std::string why;
  Connection result = serve_request(wait, ec, why);
  remember(std::move(why));
  return result;
}

// A request answered with rdma_accept whose client has not established the connection yet.
struct CmAcceptor::Answered {
  rdma_cm_id* id = nullptr;
  QueuePair qp;
  HandshakeOffer ours, theirs;
  Deadline deadline;

  Answered() = default;
  Answered(const Answered&) = delete;
  Answered& operator=(const Answered&) = delete;
  ~Answered() {
    qp = QueuePair();  // before the id it was made on
    if (id) rdma_destroy_id(id);
  }
};

std::unique_ptr<CmAcceptor::Answered> CmAcceptor::answer(const Request& request,
                                                         std::error_code& ec, std::string& why) {
  auto answered = std::make_unique<Answered>();
  answered->id = request.id;
  std::string mismatch;  // check_compatible clears it on success: `why` keeps earlier news
  HandshakeOffer& theirs = answered->theirs;
  ec = decode(request.data, OfferForm::compact, theirs);
  theirs.address.gid = gid_of(rdma_get_peer_addr(request.id)).gid;
  theirs.address.qpn = request.qpn;
  try {
    answered->qp = detail::builder_for(*resources_, options_).build(request.id);
  } catch (const Error& e) {  // out of QPs, say: this client is refused, the server goes on
    ec = e.code();
    why = e.what();
    rdma_reject(request.id, nullptr, 0);
    return nullptr;
  }
  HandshakeOffer& ours = answered->ours;
  ours = detail::make_offer(*resources_, answered->qp, options_);
  ours.address.gid = gid_of(rdma_get_local_addr(request.id)).gid;
  if (ec == Errc::handshake_version)
    check_compatible(ours, theirs, mismatch);
  else if (ec)
    mismatch = "the connection request is not an rdmakit handshake";
  else
    ec = check_compatible(ours, theirs, mismatch);
  if (ec) {
    why = mismatch;
    const std::vector<std::byte> data = reject_data(ec, why);
    answered->qp = QueuePair();
    rdma_reject(request.id, data.data(), static_cast<uint8_t>(data.size()));
    return nullptr;
  }
  const std::vector<std::byte> data = encode(ours, OfferForm::compact);
  RDMAKIT_REQUIRE(options_.user_data.size() <= kCmAcceptUserData,
                  "CmAcceptor user data above the RDMA CM limit (kCmAcceptUserData)");
  rdma_conn_param param = conn_param(data, answered->qp);
  if (rdma_accept(request.id, &param) != 0) {
    ec = verbs_error(errno);
    why = "rdma_accept: " + ec.message();
    return nullptr;
  }
  answered->deadline = std::chrono::steady_clock::now() + options_.timeout;
  return answered;
}

Connection CmAcceptor::complete(Answered& answered, std::error_code& ec, std::string& why) {
  // Later events of this connection (DISCONNECTED) go to a channel of its own.
  rdma_event_channel* own = rdma_create_event_channel();
  if (!own || rdma_migrate_id(answered.id, own) != 0) {
    ec = verbs_error(errno);
    why = "rdma_migrate_id: " + ec.message();
    if (own) rdma_destroy_event_channel(own);
    return {};
  }
  detail::CmQueuePairs::mark_ready(answered.qp);
  const Negotiated negotiated = negotiate(answered.ours, answered.theirs);
  const std::string peer =
      "rdma_cm " + GidEntry{0, answered.theirs.address.gid, GidType::roce_v2}.address();
  return Connection(resources_, std::move(answered.qp), std::move(answered.theirs), negotiated,
                    peer, std::exchange(answered.id, nullptr), own);
}

Connection CmAcceptor::serve_request(std::chrono::milliseconds wait, std::error_code& ec,
                                     std::string& why) {
  const Deadline wait_until = wait == std::chrono::milliseconds::max()
                                  ? Deadline::max()
                                  : std::chrono::steady_clock::now() + wait;
  Request request;
  if (!next_request(request, wait_until, ec)) {
    why = "waiting for a connection request: " + ec.message();
    return {};
  }
  std::unique_ptr<Answered> answered = answer(request, ec, why);
  if (!answered) return {};
  for (;;) {
    rdma_cm_event* event = next_event(channel_, answered->deadline, ec);
    if (!event) {
      why = "waiting for the connection to be established: " + ec.message();
      return {};
    }
    if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      waiting_.push_back(event);  // served by a later accept
      continue;
    }
    const bool ours_event = event->id == answered->id;
    const rdma_cm_event_type type = event->event;
    const int status = event->status;
    rdma_ack_cm_event(event);
    if (!ours_event) continue;
    if (type == RDMA_CM_EVENT_ESTABLISHED) break;
    ec = make_error_code(Errc::peer_closed);
    why = "the client went away before the connection was established: " +
          describe_event(type, status);
    return {};
  }
  return complete(*answered, ec, why);
}

Connection CmAcceptor::accept_ready() {
  std::lock_guard lock(accept_mutex_);
  const Deadline now = std::chrono::steady_clock::now();
  std::string why;
  Connection result;
  for (int i = 0; i < detail::kArrivalsPerCall && !result; ++i) {
    std::error_code ec;
    rdma_cm_event* event = nullptr;
    if (!waiting_.empty()) {
      event = waiting_.front();
      waiting_.pop_front();
    } else if (!(event = next_event(channel_, now, ec))) {
      break;  // nothing more has arrived
    }
    if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      const Request request{event->id, request_data_or_refuse(event), event->param.conn.qp_num};
      rdma_ack_cm_event(event);
      if (answered_.size() == detail::kMostConnectionsInProgress) {
        answered_.pop_front();
        why = "dropped the oldest unestablished connection for a new request";
      }
      if (std::unique_ptr<Answered> answered = answer(request, ec, why))
        answered_.push_back(std::move(answered));
      continue;
    }
    const rdma_cm_event_type type = event->event;
    const int status = event->status;
    const auto it = std::find_if(answered_.begin(), answered_.end(),
                                 [&](const auto& answered) { return answered->id == event->id; });
    rdma_ack_cm_event(event);
    if (it == answered_.end()) continue;
    const std::unique_ptr<Answered> answered = std::move(*it);
    answered_.erase(it);
    if (type == RDMA_CM_EVENT_ESTABLISHED)
      result = complete(*answered, ec, why);
    else
      why = "the client went away before the connection was established: " +
            describe_event(type, status);
  }
  // After the events: a connection established in time is not dropped for being read late.
  std::erase_if(answered_, [&](const std::unique_ptr<Answered>& answered) {
    if (now < answered->deadline) return false;
    why = "the client did not establish its connection in time";
    return true;
  });
  if (result)
    remember("");
  else if (!why.empty())
    remember(std::move(why));
  return result;
}

Connection CmAcceptor::accept(std::error_code& ec) {
  return accept_for(std::chrono::milliseconds::max(), ec);
}

Connection CmAcceptor::accept() {
  return or_throw([this](std::error_code& ec) { return accept(ec); },
                  "CmAcceptor::accept on port " + std::to_string(port_));
}

CmConnector::CmConnector(std::shared_ptr<Resources> resources, ConnectionOptions options)
    : resources_(std::move(resources)), options_(std::move(options)) {
  RDMAKIT_REQUIRE(resources_->for_rdma_cm,
                  "CmConnector needs Resources opened with for_rdma_cm = true");
}

Connection CmConnector::connect(const std::string& host, uint16_t port, std::error_code& ec) {
  std::string why;
  Connection result = [&]() -> Connection {
    const Deadline deadline = std::chrono::steady_clock::now() + options_.timeout;
    const int timeout_ms = static_cast<int>(options_.timeout.count());
    IdGuard guard{nullptr, rdma_create_event_channel()};
    if (!guard.channel || rdma_create_id(guard.channel, &guard.id, nullptr, RDMA_PS_TCP) != 0) {
      ec = verbs_error(errno);
      why = "rdma_create_id: " + ec.message();
      return {};
    }
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
      ec = verbs_error(EHOSTUNREACH);
      why = "cannot resolve " + host;
      return {};
    }
    const int rc = rdma_resolve_addr(guard.id, nullptr, found->ai_addr, timeout_ms);
    freeaddrinfo(found);
    // Each step: start it, then expect its event.
    auto expect = [&](rdma_cm_event_type wanted, const char* step) -> rdma_cm_event* {
      rdma_cm_event* event = next_event(guard.channel, deadline, ec);
      if (!event) {
        why = std::string(step) + ": " + ec.message();
        return nullptr;
      }
      if (event->event == wanted) return event;
      if (event->event == RDMA_CM_EVENT_REJECTED) {
        ec = reject_reason(private_data(event), why);
      } else {
        ec = make_error_code(event->event == RDMA_CM_EVENT_UNREACHABLE ? Errc::peer_closed
                                                                       : Errc::rejected);
        why = std::string(step) + ": " + describe_event(event->event, event->status);
      }
      rdma_ack_cm_event(event);
      return nullptr;
    };
    if (rc != 0) {
      ec = verbs_error(errno);
      why = "rdma_resolve_addr: " + ec.message();
      return {};
    }
    rdma_cm_event* event = expect(RDMA_CM_EVENT_ADDR_RESOLVED, "resolving the address");
    if (!event) return {};
    rdma_ack_cm_event(event);
    if (rdma_resolve_route(guard.id, timeout_ms) != 0) {
      ec = verbs_error(errno);
      why = "rdma_resolve_route: " + ec.message();
      return {};
    }
    if (!(event = expect(RDMA_CM_EVENT_ROUTE_RESOLVED, "resolving the route"))) return {};
    rdma_ack_cm_event(event);
    QueuePair qp = detail::builder_for(*resources_, options_).build(guard.id);
    HandshakeOffer ours = detail::make_offer(*resources_, qp, options_);
    ours.address.gid = gid_of(rdma_get_local_addr(guard.id)).gid;
    const std::vector<std::byte> data = encode(ours, OfferForm::compact);
    RDMAKIT_REQUIRE(options_.user_data.size() <= kCmConnectUserData,
                    "CmConnector user data above the RDMA CM limit (kCmConnectUserData)");
    rdma_conn_param param = conn_param(data, qp);
    if (rdma_connect(guard.id, &param) != 0) {
      ec = verbs_error(errno);
      why = "rdma_connect: " + ec.message();
      return {};
    }
    if (!(event = expect(RDMA_CM_EVENT_ESTABLISHED, "connecting"))) return {};
    HandshakeOffer theirs;
    ec = decode(private_data(event), OfferForm::compact, theirs);
    theirs.address.qpn = event->param.conn.qp_num;
    rdma_ack_cm_event(event);
    theirs.address.gid = gid_of(rdma_get_peer_addr(guard.id)).gid;
    if (ec) {
      why = "the server's reply is not an rdmakit handshake";
      return {};
    }
    detail::CmQueuePairs::mark_ready(qp);
    const Negotiated negotiated = negotiate(ours, theirs);
    rdma_cm_id* id = std::exchange(guard.id, nullptr);
    rdma_event_channel* channel = std::exchange(guard.channel, nullptr);
    return Connection(resources_, std::move(qp), std::move(theirs), negotiated,
                      "rdma_cm " + host + ":" + std::to_string(port), id, channel);
  }();
  remember(std::move(why));
  return result;
}

Connection CmConnector::connect(const std::string& host, uint16_t port) {
  return or_throw([&](std::error_code& ec) { return connect(host, port, ec); },
                  "CmConnector::connect to " + host + ":" + std::to_string(port));
}

}  // namespace rdmakit

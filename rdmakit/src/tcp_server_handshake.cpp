#include "tcp_server_handshake.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "rdmakit/error.hpp"

namespace rdmakit::detail {

ServerHandshake::~ServerHandshake() {
  close(fd_);
}

void ServerHandshake::fail(std::error_code ec, std::string why) {
  state_ = State::failed;
  ec_ = ec;
  why_ = std::move(why);
}

bool ServerHandshake::flush() {
  while (sent_ < out_.size()) {
    const ssize_t n = ::send(fd_, out_.data() + sent_, out_.size() - sent_, MSG_NOSIGNAL);
    if (n > 0) {
      sent_ += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;  // the rest when the socket has room
    } else {
      return false;
    }
  }
  out_.clear();
  sent_ = 0;
  return true;
}

bool ServerHandshake::read_frame(Frame& kind, std::vector<std::byte>& payload) {
  // The header first, then exactly its payload: what follows belongs to the next frame.
  for (;;) {
    size_t want = kFrameHeaderBytes;
    if (in_.size() >= kFrameHeaderBytes) {
      uint32_t length = 0;
      const std::span<const std::byte, kFrameHeaderBytes> header(in_.data(), kFrameHeaderBytes);
      if (const std::error_code ec = parse_frame_header(header, kind, length)) {
        fail(ec, "the client sent a malformed frame");
        return false;
      }
      want += length;
      if (in_.size() == want) {
        payload.assign(in_.begin() + kFrameHeaderBytes, in_.end());
        in_.clear();
        return true;
      }
    }
    const size_t have = in_.size();
    in_.resize(want);
    const ssize_t n = ::recv(fd_, in_.data() + have, want - have, 0);
    in_.resize(have + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    if (n > 0 || (n < 0 && errno == EINTR)) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    fail(n == 0 || errno == ECONNRESET ? make_error_code(Errc::peer_closed) : verbs_error(errno),
         "the client closed the connection during the handshake");
    return false;
  }
}

void ServerHandshake::refuse(std::error_code ec, std::string why) {
  append_frame(out_, Frame::reject, reject_payload(ec, why));
  flush();  // best effort: the client learns why if the socket takes it now
  fail(ec, std::move(why));
}

void ServerHandshake::on_offer(Frame kind, std::span<const std::byte> payload,
                               const std::shared_ptr<Resources>& resources,
                               const ConnectionOptions& options) {
  std::string why;
  if (const std::error_code ec = read_offer(kind, payload, theirs_, why)) {
    if (ec == Errc::handshake_version)
      refuse(ec, std::move(why));
    else
      fail(ec, "reading the client's offer: " + why);
    return;
  }
  try {
    qp_.emplace(builder_for(*resources, options).build());
  } catch (const Error& e) {
    refuse(e.code(), std::string("creating the QP: ") + e.what());
    return;
  }
  const HandshakeOffer ours = make_offer(*resources, *qp_, options);
  if (const std::error_code ec = check_compatible(ours, theirs_, why)) {
    refuse(ec, std::move(why));
    return;
  }
  append_frame(out_, Frame::offer, encode(ours, OfferForm::full));
  negotiated_ = negotiate(ours, theirs_);
  std::error_code ec;
  qp_->connect(theirs_.address, negotiated_.path, ec);
  if (ec) {
    refuse(ec, "connecting the QP: " + ec.message());
    return;
  }
  // Ready once our QP is connected, so the client never sends to a QP not yet in RTR.
  append_frame(out_, Frame::ready, {});
  state_ = State::reading_ready;
}

void ServerHandshake::advance(const std::shared_ptr<Resources>& resources,
                              const ConnectionOptions& options) {
  Frame kind{};
  std::vector<std::byte> payload;
  for (;;) {
    if (state_ == State::done || state_ == State::failed) return;
    if (!flush()) {
      fail(make_error_code(Errc::peer_closed),
           "the client closed the connection during the handshake");
      return;
    }
    if (state_ == State::finishing) {
      if (!wants_write()) state_ = State::done;
      return;
    }
    if (!read_frame(kind, payload)) return;  // not yet, or failed
    if (state_ == State::reading_offer) {
      on_offer(kind, payload, resources, options);
    } else if (kind == Frame::reject) {
      std::string why;
      const std::error_code ec = read_reject(payload, why);
      fail(ec, why);
    } else if (kind != Frame::ready) {
      fail(make_error_code(Errc::handshake_malformed),
           "the client sent an unexpected frame instead of ready");
    } else {
      state_ = State::finishing;  // done once our own frames have left
    }
  }
}

Connection ServerHandshake::take(const std::shared_ptr<Resources>& resources) {
  return Connection(resources, std::move(*qp_), std::move(theirs_), negotiated_,
                    "tcp " + peer_name(fd_));
}

}  // namespace rdmakit::detail

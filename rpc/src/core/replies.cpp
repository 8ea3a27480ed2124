// Requests: handed to their method's handler or queued for recv() in arrival order; held
// (bytes and receive slot pinned) until replied, turned into a token and replied, or
// dropped, which answers the caller Code::cancelled. A reply may not exceed the space the
// caller reserved.
#include <cstring>
#include <string>

#include "core/engine.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::rpc::detail {
void Engine::on_frame(const FrameHeader& h, std::span<const std::byte> payload, uint64_t cookie) {
  Session& s = *receiving_;
  s.last_heard = now_;
  s.probing = s.probing && h.kind != FrameKind::pong;
  const Channel channel = h.kind == FrameKind::request || h.kind == FrameKind::ping
                              ? Channel::request
                              : Channel::response;
  if (!s.open) {
    s.link->release(channel, cookie);
    return;
  }
  switch (h.kind) {
    case FrameKind::request:
      on_request(s, h, payload, cookie);
      break;
    case FrameKind::response:
      on_response(s, h, payload, cookie);
      break;
    case FrameKind::ping:
    case FrameKind::pong:
      on_probe(s, h, cookie);
      break;
  }
}

void Engine::on_request(Session& s, const FrameHeader& h, std::span<const std::byte> payload,
                        uint64_t cookie) {
  if (s.held >= s.link->limits().window) {
    s.link->release(Channel::request, cookie);
    close_session(s, make_error_code(Errc::protocol_error));  // beyond the agreed window
    return;
  }
  ++s.held;
  HeldRequest request{this, s.id, h.call_id, h.method, h.max_response, cookie, payload};
  if (auto it = handlers_.empty() ? handlers_.end() : handlers_.find(h.method);
      it != handlers_.end()) {
    it->second(RecvHandle(request));
  } else if (options_.queue_unhandled) {
    queue_.push(request);
  } else {
    reply_error(request, Code::unimplemented, "no handler for this method");
  }
}

std::optional<RecvHandle> Engine::recv() noexcept {
  if (queue_.empty()) return std::nullopt;
  return RecvHandle(queue_.pop());
}

void Engine::handle(uint32_t method, std::function<void(RecvHandle)> handler) {
  // A handler replaced while it runs would be destroyed under itself.
  RDMAKIT_REQUIRE(!in_poll_, "rpc: handle() called from inside poll() (a callback or handler)");
  handlers_[method] = std::move(handler);
}

void Engine::release_request(Session& s, uint64_t cookie) noexcept {
  s.link->release(Channel::request, cookie);
  --s.held;
}

std::error_code Engine::reply(HeldRequest& request, size_t size, Fill fill, Code code) {
  RDMAKIT_REQUIRE(request.engine == this, "rpc: reply on an empty or moved-from handle or token");
  request.engine = nullptr;
  Session* s = find(request.session);
  RDMAKIT_REQUIRE(s != nullptr, "rpc: reply on a request whose session is gone");
  if (!s->open) {
    release_request(*s, request.release_cookie);
    return make_error_code(Errc::session_closed);
  }
  std::error_code refused;
  std::string why;
  auto write_why = [&why](std::span<std::byte> out) {
    std::memcpy(out.data(), why.data(), out.size());
  };
  if (size > request.max_response) {
    refused = make_error_code(Errc::response_too_large);
    why = "reply of " + std::to_string(size) + " bytes exceeds the " +
          std::to_string(request.max_response) + " bytes the caller reserved";
  } else if (size > s->link->limits().max_message_bytes) {
    refused = make_error_code(Errc::message_too_large);
    why = "reply exceeds the session's message size limit";
  }
  if (refused) {
    // The caller still gets an answer, within its reservation.
    code = Code::resource_exhausted;
    size = std::min<size_t>(why.size(), request.max_response);
    fill = write_why;
  }
  FrameHeader h{};
  h.length = static_cast<uint32_t>(size);
  h.kind = FrameKind::response;
  h.status = static_cast<uint8_t>(code);
  h.call_id = request.call_id;
  std::byte* payload = s->link->begin(Channel::response, h);
  if (payload == nullptr) {
    // The caller reserved this space: only a peer that broke the protocol leaves none. The
    // session closes at the next poll, where its calls can be answered.
    release_request(*s, request.release_cookie);
    request_close(s->id);
    return make_error_code(Errc::session_closed);
  }
  fill(std::span<std::byte>(payload, size));
  s->link->commit(Channel::response);
  mark_dirty(*s);
  release_request(*s, request.release_cookie);  // after fill: it may read the request
  return refused;
}

std::error_code Engine::reply_error(HeldRequest& request, Code code, std::string_view message) {
  RDMAKIT_REQUIRE(code != Code::ok, "rpc: reply_error with Code::ok");
  const size_t size = std::min<size_t>(message.size(), request.max_response);
  return reply(
      request, size,
      [message](std::span<std::byte> out) { std::memcpy(out.data(), message.data(), out.size()); },
      code);
}

void Engine::drop(HeldRequest& request) noexcept {
  reply_error(request, Code::cancelled, "the server dropped the request without a reply");
}

PinnedRequest::PinnedRequest(PinnedRequest&& other) noexcept : held_(other.release()) {}
PinnedRequest& PinnedRequest::operator=(PinnedRequest&& other) noexcept {
  if (this != &other) {
    if (held_.engine != nullptr) held_.engine->drop(held_);
    held_ = other.release();
  }
  return *this;
}
PinnedRequest::~PinnedRequest() {
  if (held_.engine != nullptr) held_.engine->drop(held_);
}
HeldRequest PinnedRequest::release() noexcept {
  return std::exchange(held_, {});
}

}  // namespace rdmakit::rpc::detail

namespace rdmakit::rpc {

std::error_code RecvHandle::reply(std::span<const std::byte> response) && {
  detail::HeldRequest& held = held_.get();
  RDMAKIT_REQUIRE(held.engine != nullptr, "rpc: reply on an empty or moved-from RecvHandle");
  return held.engine->reply(held, response.size(), detail::copying(response), Code::ok);
}
std::error_code RecvHandle::reply_with(size_t size, Fill fill) && {
  detail::HeldRequest& held = held_.get();
  RDMAKIT_REQUIRE(held.engine != nullptr, "rpc: reply on an empty or moved-from RecvHandle");
  return held.engine->reply(held, size, fill, Code::ok);
}
std::error_code RecvHandle::reply_error(Code code, std::string_view message) && {
  detail::HeldRequest& held = held_.get();
  RDMAKIT_REQUIRE(held.engine != nullptr, "rpc: reply on an empty or moved-from RecvHandle");
  return held.engine->reply_error(held, code, message);
}
RequestToken RecvHandle::into_token() && noexcept {
  return RequestToken(held_.release());
}

}  // namespace rdmakit::rpc

// Calls: issued into the session's send space with their reply space reserved (so the
// reply can never fail for lack of room), completed by their response, their deadline, a
// cancellation or the session closing: exactly once, always with a Status.
#include <algorithm>
#include <cstring>

#include "core/engine.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::rpc::detail {

CallResult Engine::call(SessionId id, size_t size, Fill fill, uint64_t user_data,
                        const CallOptions& options, CallAwaitable* awaiter) {
  Session* s = find(id);
  if (s == nullptr) {
    return {{}, make_error_code(existed(id) ? Errc::session_closed : Errc::no_such_session)};
  }
  if (!s->open || s->close_requested) return {{}, make_error_code(Errc::session_closed)};
  const LinkLimits& limits = s->link->limits();
  const uint32_t max_response =
      options.max_response != 0 ? options.max_response : options_.default_max_response;
  if (size > limits.max_message_bytes || max_response > limits.max_message_bytes)
    return {{}, make_error_code(Errc::message_too_large)};
  const size_t reservation = s->link->reservation(max_response);
  if (s->calls.full() || s->reserved + reservation > s->link->response_capacity())
    return {{}, make_error_code(Errc::would_block)};

  const uint32_t slot = s->calls.take();
  CallSlot& c = s->calls[slot];
  FrameHeader h{};
  h.length = static_cast<uint32_t>(size);
  h.kind = FrameKind::request;
  h.call_id = s->calls.id_of(slot);
  h.method = options.method;
  h.max_response = max_response;
  std::byte* payload = s->link->begin(Channel::request, h);
  if (payload == nullptr) {
    s->calls.free(slot);
    if (s->link->failure()) return {{}, make_error_code(Errc::session_closed)};
    return {{}, make_error_code(Errc::would_block)};
  }
  fill(std::span<std::byte>(payload, size));
  s->link->commit(Channel::request);
  mark_dirty(*s);

  c.state = SlotState::pending;
  c.user_data = user_data;
  c.awaiter = awaiter;
  c.reservation = static_cast<uint32_t>(reservation);
  c.max_response = max_response;
  s->reserved += reservation;
  const auto timeout = options.timeout.count() != 0 ? options.timeout : options_.default_timeout;
  if (timeout.count() > 0) {
    c.deadline = clock_.now() + timeout;
    next_deadline_ = std::min(next_deadline_, c.deadline);
  }
  return {CallId{id, h.call_id}, {}};
}

void Engine::on_response(Session& s, const FrameHeader& h, std::span<const std::byte> payload,
                         uint64_t cookie) {
  CallSlot* c = s.calls.find(h.call_id);
  if (c == nullptr || c->state == SlotState::free) {
    // Not a call of ours in flight: a duplicate or forged response. It completes nothing.
    s.link->release(Channel::response, cookie);
    return;
  }
  if (h.length > c->max_response || h.status > kLastCode) {
    s.link->release(Channel::response, cookie);
    close_session(s, make_error_code(Errc::protocol_error));
    return;
  }
  const uint32_t slot = slot_of(h.call_id);
  s.reserved -= c->reservation;
  if (c->state == SlotState::pending || c->state == SlotState::cancelling) {
    Response r;
    r.user_data = c->user_data;
    r.session = s.id;
    if (c->state == SlotState::cancelling) {
      r.status = {Code::cancelled, "cancelled by the caller"};  // as cancel() promised
    } else if (r.status.code = static_cast<Code>(h.status); r.status.ok()) {
      r.data = payload;
    } else {
      r.status.message = {reinterpret_cast<const char*>(payload.data()), payload.size()};
    }
    complete(s, slot, r);
  } else {
    s.calls.free(slot);  // orphaned: its caller was answered already
  }
  s.link->release(Channel::response, cookie);
  if (s.waiters_head != nullptr) issue_waiting_calls(s);
}

void Engine::complete(Session& s, uint32_t slot, const Response& response) {
  // Free the slot first: the callback may issue the next call into it.
  CallAwaitable* awaiter = s.calls[slot].awaiter;
  s.calls.free(slot);
  deliver(response, awaiter);
}

void Engine::deliver(const Response& response, CallAwaitable* awaiter) {
  if (awaiter != nullptr) {
    awaiter->result_ = response;
    awaiter->state_ = CallAwaitable::State::done;
    awaiter->waiting_.resume();
    return;
  }
  if (on_response_ != nullptr) {
    (*on_response_)(response);
  } else {
    RDMAKIT_REQUIRE(default_callback_ != nullptr,
                    "rpc: a response to a call made with user_data arrived in poll() without a "
                    "response callback (use poll(on_response) or on_response())");
    default_callback_(response);
  }
}

bool Engine::cancel(CallId id) noexcept {
  Session* s = find(id.session);
  if (s == nullptr) return false;
  CallSlot* c = s->calls.find(id.value);
  if (c == nullptr || c->state != SlotState::pending) return false;
  c->state = SlotState::cancelling;
  cancels_pending_ = true;
  return true;
}

void Engine::expire_deadlines() {
  // Deadlines and cancellations turn calls into orphans: answered now, their slot and reply
  // space kept until the late response arrives (or the session closes).
  cancels_pending_ = false;
  next_deadline_ = Clock::time_point::max();
  // By index: callbacks run here may open sessions (the vector may grow).
  for (size_t index = 0; index < sessions_.size(); ++index) {
    Session* s = sessions_[index].get();
    if (s == nullptr || !s->open) continue;
    for (uint32_t i = 0; i < s->calls.size(); ++i) {
      CallSlot& c = s->calls[i];
      Code code;
      if (c.state == SlotState::cancelling) {
        code = Code::cancelled;
      } else if (c.state == SlotState::pending && c.deadline <= now_) {
        code = Code::deadline_exceeded;
      } else {
        if (c.state == SlotState::pending) next_deadline_ = std::min(next_deadline_, c.deadline);
        continue;
      }
      c.state = SlotState::orphaned;
      CallAwaitable* awaiter = std::exchange(c.awaiter, nullptr);
      Response r;
      r.user_data = c.user_data;
      r.session = s->id;
      r.status = {code, code == Code::cancelled ? "cancelled by the caller"
                                                : "no response within the call's timeout"};
      deliver(r, awaiter);
    }
  }
}

void Engine::fail_calls(Session& s, Status status) {
  for (uint32_t i = 0; i < s.calls.size(); ++i) {
    CallSlot& c = s.calls[i];
    if (c.state == SlotState::free) continue;
    s.reserved -= c.reservation;
    if (c.state == SlotState::orphaned) {
      s.calls.free(i);
      continue;
    }
    Response r;
    r.user_data = c.user_data;
    r.session = s.id;
    r.status = status;
    complete(s, i, r);
  }
  while (CallAwaitable* a = s.waiters_head) {
    s.waiters_head = a->next_waiter_;
    a->next_waiter_ = nullptr;
    Response r;
    r.session = s.id;
    r.status = status;
    deliver(r, a);
  }
  s.waiters_tail = nullptr;
}

void Engine::wait_for_window(CallAwaitable& awaiter) noexcept {
  Session* s = find(awaiter.session_);
  RDMAKIT_REQUIRE(s != nullptr, "rpc: a coroutine call waits on a session that is gone");
  awaiter.next_waiter_ = nullptr;
  if (s->waiters_tail != nullptr) {
    s->waiters_tail->next_waiter_ = &awaiter;
  } else {
    s->waiters_head = &awaiter;
  }
  s->waiters_tail = &awaiter;
}

void Engine::issue_waiting_calls(Session& s) {
  while (CallAwaitable* a = s.waiters_head) {
    if (!a->try_issue()) return;  // still no room: keep the order
    s.waiters_head = a->next_waiter_;
    if (s.waiters_head == nullptr) s.waiters_tail = nullptr;
    a->next_waiter_ = nullptr;
    if (a->state_ == CallAwaitable::State::done) a->waiting_.resume();  // failed: tell it now
  }
}

void Engine::forget(CallAwaitable& awaiter) noexcept {
  Session* s = find(awaiter.session_);
  if (s == nullptr) return;
  if (awaiter.state_ == CallAwaitable::State::in_flight) {
    if (CallSlot* c = s->calls.find(awaiter.id_.value); c != nullptr && c->awaiter == &awaiter) {
      c->awaiter = nullptr;
      c->state = SlotState::orphaned;
    }
    return;
  }
  // Waiting for room: unlink it.
  CallAwaitable** link = &s->waiters_head;
  CallAwaitable* previous = nullptr;
  while (*link != nullptr && *link != &awaiter) {
    previous = *link;
    link = &(*link)->next_waiter_;
  }
  if (*link == nullptr) return;
  *link = awaiter.next_waiter_;
  if (s->waiters_tail == &awaiter) s->waiters_tail = previous;
}

}  // namespace rdmakit::rpc::detail

// --- the coroutine form

namespace rdmakit::rpc {

bool CallAwaitable::try_issue() noexcept {
  CallResult r =
      engine_->call(session_, request_.size(), detail::copying(request_), 0, options_, this);
  if (r.ok()) {
    id_ = r.id;
    state_ = State::in_flight;
    return true;
  }
  if (r.error == Errc::would_block) return false;
  result_.session = session_;
  result_.status = {r.error == Errc::message_too_large ? Code::invalid_argument : Code::unavailable,
                    r.error == Errc::message_too_large ? "message too large" : "session closed"};
  state_ = State::done;
  return true;
}

bool CallAwaitable::await_ready() noexcept {
  if (engine_ == nullptr) {
    result_.status = {Code::unavailable, "the endpoint is gone"};
    state_ = State::done;
    return true;
  }
  if (try_issue()) return state_ == State::done;
  state_ = State::waiting_for_window;
  return false;
}

void CallAwaitable::await_suspend(std::coroutine_handle<> waiting) noexcept {
  waiting_ = waiting;
  if (state_ == State::waiting_for_window) engine_->wait_for_window(*this);
}

CallAwaitable::~CallAwaitable() {
  if (engine_ != nullptr && (state_ == State::in_flight || state_ == State::waiting_for_window)) {
    engine_->forget(*this);
  }
}

}  // namespace rdmakit::rpc

// Sessions: opened by connect() or accepted in the sweep, closed when their link fails, the
// peer stops answering probes, or the application asks. Closing answers every pending call
// (Code::unavailable); the link stays until the application has released every request of
// the session it still holds, so no pinned bytes go away under a handle.
#include <algorithm>
#include <string>

#include "core/engine.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::rpc::detail {

Session* Engine::find(SessionId id) const noexcept {
  if (id.index >= sessions_.size()) return nullptr;
  Session* s = sessions_[id.index].get();
  return s != nullptr && s->id.generation == id.generation ? s : nullptr;
}

SessionId Engine::add_session(std::unique_ptr<Link> link) {
  uint32_t index = 0;
  while (index < sessions_.size() && sessions_[index] != nullptr) ++index;
  if (index == sessions_.size()) {
    sessions_.emplace_back();
    generations_.push_back(0);
  }
  const uint32_t generation = generations_[index]++;
  update_wait_set(link->wait_fd(), true);
  sessions_[index] = std::make_unique<Session>(std::move(link), index, generation);
  Session& s = *sessions_[index];
  s.last_heard = clock_.refresh();
  s.marked = s.link->attach(index);
  if (s.marked) {
    ready_words_ = std::max(ready_words_, size_t{index} / 64 + 1);
    markable_.push_back(index);
    doorbell_->set_wants_marks(markable_.size() > kScanLimit);
  } else {
    scanned_.push_back(index);
  }
  ++open_sessions_;
  if (options_.on_session) options_.on_session(s.id, SessionEvent::opened);
  return s.id;
}

void Engine::accept_sessions() {
  // A few per sweep, so a connection storm cannot starve the sessions already open.
  for (int i = 0; i < 16; ++i) {
    std::unique_ptr<Link> link = listener_->accept();
    if (!link) return;
    add_session(std::move(link));
  }
}

void Engine::request_close(SessionId id) noexcept {
  if (Session* s = find(id); s != nullptr && s->open) {
    s->close_requested = true;
    next_sweep_ = Clock::time_point{};
  }
}

void Engine::check_sessions(bool look_for_dead_peers) {
  // By index: callbacks run here may open sessions (the vector may grow).
  for (size_t index = 0; index < sessions_.size(); ++index) {
    Session* s = sessions_[index].get();
    if (s == nullptr) continue;
    if (s->open) {
      if (s->close_requested) {
        close_session(*s, make_error_code(Errc::session_closed));
      } else {
        if (look_for_dead_peers) s->link->check_alive();
        if (std::error_code failure = s->link->failure()) {
          close_session(*s, failure);
        } else if (options_.peer_timeout.count() > 0) {
          probe(*s);
        }
      }
    }
    if (s->open && s->waiters_head != nullptr) issue_waiting_calls(*s);  // room may have freed
    if (!s->open) destroy_if_done(*s);
  }
}

void Engine::close_session(Session& s, std::error_code why) {
  if (!s.open) return;
  s.open = false;
  --open_sessions_;
  update_wait_set(s.link->wait_fd(), false);
  s.link->shut_down();
  const std::string reason = "session closed: " + why.message();
  fail_calls(s, Status{Code::unavailable, reason});
  // Requests not yet taken by recv() can no longer be answered: release them now.
  queue_.retain([&](HeldRequest& r) {
    if (r.session != s.id) return true;
    release_request(s, r.release_cookie);
    return false;
  });
  if (options_.on_session) options_.on_session(s.id, SessionEvent::closed);
}

void Engine::destroy_if_done(Session& s) noexcept {
  if (s.held != 0 || s.dirty) return;  // the application still holds requests of it
  const uint32_t index = s.id.index;
  if (s.marked) {
    std::erase(markable_, index);
    doorbell_->set_wants_marks(markable_.size() > kScanLimit);
  } else {
    std::erase(scanned_, index);
  }
  sessions_[index].reset();
}

void Engine::probe(Session& s) {
  const bool waiting = s.calls.in_use() > 0 || s.probing;
  if (!waiting) {
    s.last_heard = now_;  // silence with nothing pending is not suspicious
    return;
  }
  if (now_ - s.last_heard < options_.peer_timeout) return;
  if (s.probing) {
    if (now_ - s.probe_sent >= options_.peer_timeout)
      close_session(s, make_error_code(Errc::session_closed));
    return;
  }
  // The answer (a pong) travels in our response space: reserve it like a reply.
  const size_t reservation = s.link->reservation(0);
  if (s.reserved + reservation > s.link->response_capacity()) return;
  FrameHeader h{};
  h.kind = FrameKind::ping;
  if (s.link->begin(Channel::request, h) == nullptr) return;
  s.link->commit(Channel::request);
  mark_dirty(s);
  s.reserved += reservation;
  s.probe_reservation = static_cast<uint32_t>(reservation);
  s.probing = true;
  s.probe_sent = now_;
}

void Engine::on_probe(Session& s, const FrameHeader& h, uint64_t cookie) {
  if (h.kind == FrameKind::ping) {
    s.link->release(Channel::request, cookie);
    FrameHeader pong{};
    pong.kind = FrameKind::pong;
    if (s.link->begin(Channel::response, pong) != nullptr) {
      s.link->commit(Channel::response);
      mark_dirty(s);
    }
    return;
  }
  s.link->release(Channel::response, cookie);
  if (s.probe_reservation != 0) {
    s.reserved -= s.probe_reservation;
    s.probe_reservation = 0;
  }
}

}  // namespace rdmakit::rpc::detail

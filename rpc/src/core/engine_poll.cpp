// The poll loop: flush what was queued, take in what arrived, sweep now and then, flush
// again. wait(): poll, spin, then (blocking mode) sleep on the endpoint's descriptors.
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>

#include "core/engine.hpp"
#include "core/publish_order.hpp"
#include "rdmakit/error.hpp"

namespace rdmakit::rpc::detail {
namespace {

// Frames taken from one session per poll: bounds the time one busy peer holds the loop.
constexpr int kReceiveBudget = 64;
// How often the sweep runs while polling: accepts sessions, checks liveness and deadlines.
constexpr auto kSweepInterval = std::chrono::microseconds(200);
// How often links look for a dead peer with a system call while polling (a sleeping endpoint
// is woken by the peer's descriptor instead).
constexpr auto kLivenessInterval = std::chrono::milliseconds(2);
// The longest a sleeping endpoint goes without a sweep while calls or probes are pending.
constexpr auto kSleepSlice = std::chrono::milliseconds(10);

}  // namespace

Engine::Engine(const Options& options)
    : options_(options), doorbell_(std::make_shared<Doorbell>()) {
  RDMAKIT_REQUIRE(options_.window >= 1 && options_.window <= kMaxWindow,
                  "rpc::Options::window must be between 1 and 65535");
  RDMAKIT_REQUIRE(options_.default_max_response <= options_.max_message_bytes,
                  "rpc::Options::default_max_response exceeds max_message_bytes");
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw_verbs_error("epoll_create1", errno, "an rpc endpoint");
  update_wait_set(doorbell_->fd(), true);
  now_ = clock_.refresh();
}

Engine::~Engine() {
  // Coroutines still waiting are not resumed (their frames belong to their owners); their
  // awaiters are told the engine is gone.
  for (auto& s : sessions_) {
    if (!s) continue;
    for (uint32_t i = 0; i < s->calls.size(); ++i) {
      if (CallAwaitable* a = s->calls[i].awaiter) a->engine_ = nullptr;
    }
    for (CallAwaitable* a = s->waiters_head; a != nullptr; a = a->next_waiter_)
      a->engine_ = nullptr;
  }
  // Queued requests release their bytes; the links go with the sessions.
  while (!queue_.empty()) queue_.pop();
  sessions_.clear();
  close(epoll_fd_);
}

void Engine::update_wait_set(int fd, bool add) noexcept {
  if (fd < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd_, add ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, fd, &ev);
}

void Engine::set_listener(std::unique_ptr<Listener> listener) {
  listener_ = std::move(listener);
  update_wait_set(listener_->wait_fd(), true);
}

const std::string& Engine::url() const noexcept {
  static const std::string none;
  return listener_ ? listener_->url() : none;
}

void Engine::mark_dirty(Session& s) noexcept {
  if (!s.dirty) {
    s.dirty = true;
    dirty_.push_back(&s);
  }
}

void Engine::flush_dirty() noexcept {
  if (dirty_.empty()) return;
  size_t to_notify = 0;
  for (Session* s : dirty_) {
    s->dirty = false;
    if (s->link->flush()) dirty_[to_notify++] = s;
  }
  if (to_notify != 0) {
    publish_fence();
    for (size_t i = 0; i < to_notify; ++i) dirty_[i]->link->notify();
  }
  dirty_.clear();
}

int Engine::poll(OnResponse* on_response) {
  RDMAKIT_REQUIRE(!in_poll_, "rpc: poll() or wait() re-entered from a callback or handler");
  in_poll_ = true;
  on_response_ = on_response;
  now_ = clock_.now();
  flush_dirty();
  int handled = 0;
  // With many sessions that peers can mark ready, only the marked ones are visited (and all
  // of them on sweep rounds, which bounds the delay of a mark missed while marks were being
  // turned on); with few, scanning them costs less than the peers' marking.
  const bool sweeping = now_ >= next_sweep_;
  if (doorbell_->wants_marks() && !sweeping) {
    for (size_t w = 0; w < ready_words_; ++w) {
      for (uint64_t bits = doorbell_->take_ready(w); bits != 0; bits &= bits - 1) {
        const auto index = static_cast<uint32_t>(w * 64 + std::countr_zero(bits));
        if (Session* s = sessions_[index].get()) handled += visit(*s);
      }
    }
  } else {
    for (size_t i = 0; i < markable_.size(); ++i) handled += visit(*sessions_[markable_[i]]);
  }
  for (size_t i = 0; i < scanned_.size(); ++i) handled += visit(*sessions_[scanned_[i]]);
  if (sweeping || cancels_pending_) sweep();
  flush_dirty();
  in_poll_ = false;
  on_response_ = nullptr;
  return handled;
}

int Engine::visit(Session& s) {
  if (!s.open) return 0;
  receiving_ = &s;
  const int n = s.link->receive(*this, kReceiveBudget);
  receiving_ = nullptr;
  if (s.marked && n == kReceiveBudget && doorbell_->wants_marks())
    doorbell_->mark_ready(s.id.index);  // more may wait
  if (std::error_code failure = s.link->failure()) close_session(s, failure);
  if (s.waiters_head != nullptr) issue_waiting_calls(s);
  return n;
}

void Engine::sweep() {
  next_sweep_ = now_ + kSweepInterval;
  if (listener_) accept_sessions();
  const bool look_for_dead_peers = now_ >= next_liveness_check_;
  if (look_for_dead_peers) next_liveness_check_ = now_ + kLivenessInterval;
  check_sessions(look_for_dead_peers);
  if (now_ >= next_deadline_ || cancels_pending_) expire_deadlines();
}

int Engine::wait(std::chrono::microseconds timeout, OnResponse* on_response) {
  const Clock::time_point start = clock_.refresh();
  const Clock::time_point deadline = start + timeout;
  const Clock::time_point spin_until =
      options_.mode == Mode::busy_poll ? deadline : std::min(deadline, start + options_.spin);
  for (;;) {
    if (int n = poll(on_response); n > 0) return n;
    const Clock::time_point now = now_;
    if (now >= deadline) return 0;
    if (now < spin_until) continue;
    sleep_until(deadline);
    if (int n = poll(on_response); n > 0) return n;
  }
}

void Engine::sleep_until(Clock::time_point deadline) {
  // Ask every peer to signal us, then look once more: a frame published before a peer saw
  // our flag is seen here (see RingLink::flush()).
  bool input = false;
  for (auto& s : sessions_) {
    if (s && s->open) {
      s->link->set_sleeping(true);
      input = input || s->link->has_input();
    }
  }
  if (!input) {
    Clock::time_point until = deadline;
    bool busy = next_deadline_ != Clock::time_point::max() || options_.peer_timeout.count() > 0;
    if (busy) until = std::min(until, Clock::now() + kSleepSlice);
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
    epoll_event events[16];
    const int n =
        epoll_wait(epoll_fd_, events, 16, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == doorbell_->fd()) doorbell_->clear();
    }
  }
  for (auto& s : sessions_) {
    if (s && s->open) s->link->set_sleeping(false);
  }
  // Accept and look for dead peers on the next poll: a descriptor may have woken us for that.
  next_sweep_ = Clock::time_point{};
  next_liveness_check_ = Clock::time_point{};
}

}  // namespace rdmakit::rpc::detail

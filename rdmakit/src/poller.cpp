#include "rdmakit/poller.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

namespace rdmakit {

using detail::Operation;

namespace {
// How often pending deadlines are checked while operations with a timeout are in flight.
constexpr auto kSweepPeriod = std::chrono::milliseconds(1);
// Busy-polling rounds between two clock reads while deadlines are pending.
constexpr uint32_t kRoundsPerClockRead = 32;
static_assert((kRoundsPerClockRead & (kRoundsPerClockRead - 1)) == 0, "a power of two");
}  // namespace

Poller::Poller(const CompletionQueue& cq, const CompletionChannel* channel)
    : cq_(cq), raw_cq_(cq.get()), channel_(channel) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw_verbs_error("eventfd", errno, "poller wake-up");
}

Poller::~Poller() {
  RDMAKIT_REQUIRE(attached_ == nullptr, "Poller destroyed before its AsyncQueuePairs");
  close(wake_fd_);
}

void Poller::attach(AsyncQueuePair* qp) noexcept {
  qp->next_attached_ = attached_;
  qp->prev_attached_ = nullptr;
  if (attached_) attached_->prev_attached_ = qp;
  attached_ = qp;
}

void Poller::detach(AsyncQueuePair* qp) noexcept {
  (qp->prev_attached_ ? qp->prev_attached_->next_attached_ : attached_) = qp->next_attached_;
  if (qp->next_attached_) qp->next_attached_->prev_attached_ = qp->prev_attached_;
  if (qp->dirty_) {
    AsyncQueuePair** link = &dirty_head_;
    while (*link != qp) link = &(*link)->next_dirty_;
    *link = qp->next_dirty_;
  }
}

void Poller::mark_dirty(AsyncQueuePair* qp) noexcept {
  if (qp->dirty_) return;
  const bool was_idle = dirty_head_ == nullptr;
  qp->dirty_ = true;
  qp->next_dirty_ = dirty_head_;
  dirty_head_ = qp;
  if (was_idle && pending_hook_) pending_hook_(pending_context_);
}

void Poller::flush() noexcept {
  // Receives first, on every QP: a send queued in the same round may be answered at once
  // (on UD a datagram without a posted receive is dropped).
  for (AsyncQueuePair* qp = dirty_head_; qp; qp = qp->next_dirty_)
    if (qp->pending_recvs_.head) qp->flush_recvs();
  AsyncQueuePair* qp = std::exchange(dirty_head_, nullptr);
  AsyncQueuePair* still_pending = nullptr;
  while (qp) {
    AsyncQueuePair* next = qp->next_dirty_;
    qp->flush();
    // A full queue keeps the rest pending until completions make room.
    if (qp->pending_sends_.head || qp->pending_recvs_.head) {
      qp->next_dirty_ = still_pending;
      still_pending = qp;
    } else {
      qp->dirty_ = false;
    }
    qp = next;
  }
  // QPs that became dirty during flush (a failed post resumed a coroutine) are kept too.
  while (still_pending) {
    AsyncQueuePair* next = still_pending->next_dirty_;
    still_pending->next_dirty_ = dirty_head_;
    dirty_head_ = still_pending;
    still_pending = next;
  }
}

int Poller::poll() noexcept {
  // Sweeping first finishes cancelled operations that were never posted without posting them.
  if (timed_ != 0) sweep(false);
  if (dirty_head_) flush();
  const int n = ibv_poll_cq(raw_cq_, kBatch, completions_.data());
  for (int i = 0; i < n; ++i) {
    const ibv_wc& wc = completions_[static_cast<size_t>(i)];
    auto* op = reinterpret_cast<Operation*>(wc.wr_id);
    op->on_completion(op, wc);
  }
  return std::max(n, 0);
}

void Poller::sweep(bool read_clock) noexcept {
  const bool cancel = attention_.load(std::memory_order_relaxed) &&
                      attention_.exchange(false, std::memory_order_acq_rel);
  // Stop tokens raise attention_; only deadlines need the clock, read every few busy rounds.
  read_clock = read_clock || (++rounds_since_clock_ & (kRoundsPerClockRead - 1)) == 0;
  if (!cancel && (deadlines_ == 0 || !read_clock)) return;
  const auto now = Operation::Steady::now();
  if (!cancel && now < next_sweep_) return;
  next_sweep_ = now + kSweepPeriod;
  for (AsyncQueuePair* qp = attached_; qp; qp = qp->next_attached_)
    if (qp->timed_ != 0) qp->sweep(now);
}

int Poller::channel_fd() const noexcept {
  return channel_ ? channel_->fd() : -1;
}

void Poller::wake() noexcept {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
}

bool Poller::poll_and_arm(int rounds) noexcept {
  for (int i = 0; i < rounds; ++i)
    if (poll() == 0) break;
  (void)cq_.request_notify();
  // A completion that arrived before arming does not fire the channel: look once more.
  return poll() == 0;
}

void Poller::take_channel_event() noexcept {
  RDMAKIT_REQUIRE(channel_ != nullptr, "Poller::take_channel_event without a completion channel");
  std::error_code ec;
  cq_.take_event(ec);  // EAGAIN when another waiter took it: nothing to acknowledge
}

void Poller::clear_wake() noexcept {
  uint64_t count;
  [[maybe_unused]] ssize_t n = read(wake_fd_, &count, sizeof count);
}

int Poller::wait(std::chrono::milliseconds timeout) noexcept {
  RDMAKIT_REQUIRE(channel_ != nullptr, "Poller::wait needs the CQ's completion channel");
  if (int n = poll()) return n;
  (void)cq_.request_notify();
  // A completion that arrived before arming does not fire the channel: look once more.
  if (int n = poll()) return n;
  // Deadlines are checked while asleep too.
  if (deadlines_ != 0) timeout = std::min(timeout, std::chrono::milliseconds(kSweepPeriod));
  pollfd fds[2] = {{channel_->fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  std::error_code ignored;
  if (::poll(fds, 2, static_cast<int>(timeout.count())) > 0) {
    if (fds[0].revents & POLLIN) cq_.take_event(ignored);
    if (fds[1].revents & POLLIN) clear_wake();
  }
  if (timed_ != 0) sweep(true);  // after sleeping, deadlines may have passed
  return poll();
}

}  // namespace rdmakit

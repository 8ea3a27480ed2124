#include "rdmakit/async_queue_pair.hpp"

#include <arpa/inet.h>

#include <algorithm>

#include "rdmakit/poller.hpp"

namespace rdmakit {

using detail::Operation;
using detail::RecvOperation;
using detail::SendOperation;

void Operation::request_cancel() noexcept {
  cancel_requested.store(true, std::memory_order_release);
  qp->cancel_requested_.store(true, std::memory_order_release);
  qp->poller_.attention_.store(true, std::memory_order_release);
  qp->poller_.wake();
}

bool AsyncQueuePair::List::remove(Operation* op) noexcept {
  Operation* prev = nullptr;
  for (Operation* cur = head; cur; prev = cur, cur = cur->next) {
    if (cur != op) continue;
    (prev ? prev->next : head) = cur->next;
    if (tail == cur) tail = prev;
    return true;
  }
  return false;
}

// Inline into the completion handlers: on every operation's path.
[[gnu::always_inline]] inline void AsyncQueuePair::finish(Operation* op,
                                                          std::error_code result) noexcept {
  op->result = result;
  if (op->timed) [[unlikely]]
    stop_timing(op);
  --in_flight_;
  op->waiter.resume();
}

void AsyncQueuePair::start_timing(Operation* op) noexcept {
  const bool stoppable = op->stop && op->stop->stop_possible();
  if (op->timeout.count() <= 0 && !stoppable) return;
  op->timed = true;
  ++timed_;
  ++poller_.timed_;
  if (op->timeout.count() > 0) {
    ++poller_.deadlines_;
    op->deadline = Operation::Steady::now() + op->timeout;
  }
  if (stoppable) op->watch_stop();
}

void AsyncQueuePair::stop_timing(Operation* op) noexcept {
  --timed_;
  --poller_.timed_;
  if (op->timeout.count() > 0) --poller_.deadlines_;
  op->unwatch_stop();
}

AsyncQueuePair::AsyncQueuePair(Poller& poller, QueuePair& qp)
    : poller_(poller),
      qp_(qp),
      raw_(qp.get()),
      inline_size_(qp.caps().inline_size),
      send_room_(qp.caps().send_depth),
      recv_room_(qp.caps().recv_depth),
      // Signal a few times per queue depth so room frees before the queue runs dry.
      signal_interval_(std::max(1u, qp.caps().send_depth / 4)) {
  RDMAKIT_REQUIRE(qp.ready(), "AsyncQueuePair over a queue pair that is not connected");
  RDMAKIT_REQUIRE(raw_->send_cq == poller.cq().get() &&
                      (raw_->srq != nullptr || raw_->recv_cq == poller.cq().get()),
                  "AsyncQueuePair: the QP's completion queues are not the poller's");
  poller_.attach(this);
}

AsyncQueuePair::~AsyncQueuePair() {
  RDMAKIT_REQUIRE(in_flight_ == 0,
                  "AsyncQueuePair destroyed with operations in flight (let them complete, "
                  "or cancel them and keep polling until they do)");
  poller_.detach(this);
}

inline bool AsyncQueuePair::may_post_at_once(const Operation* op) const noexcept {
  // A stop requested before submission (the callback runs at once) cancels it unposted.
  return !failed_ && !pending_sends_.head && !pending_recvs_.head &&
         !(op->timed && op->cancel_requested.load(std::memory_order_acquire));
}

inline int AsyncQueuePair::post_alone(SendOperation& op) noexcept {
  op.wr.send_flags |= IBV_SEND_SIGNALED;  // alone, so it retires itself
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(raw_, &op.wr, &bad);
}

inline int AsyncQueuePair::post_alone(RecvOperation& op) noexcept {
  op.wr.next = nullptr;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(raw_, &op.wr, &bad);
}

inline void AsyncQueuePair::retire_oldest_send(Operation* done, const ibv_wc& wc) noexcept {
  posted_sends_.pop();
  ++send_room_;
  done->byte_len = wc.byte_len;
}

template <typename Op>
inline void AsyncQueuePair::submit_to(Op* op, List AsyncQueuePair::*posted,
                                      List AsyncQueuePair::*pending,
                                      uint32_t AsyncQueuePair::*room) noexcept {
  ++in_flight_;
  if (op->timeout.count() > 0 || op->stop) [[unlikely]]
    start_timing(op);
  if (may_post_at_once(op) && !(this->*posted).head && this->*room != 0) {
    op->wr.wr_id = reinterpret_cast<uintptr_t>(static_cast<Operation*>(op));
    if (post_alone(*op) == 0) [[likely]] {
      --(this->*room);
      (this->*posted).push(op);
      return;
    }
  }
  queue(this->*pending, op);  // a failed post fails again in flush, finishing it
}

bool AsyncQueuePair::submit(SendOperation* op) noexcept {
  // Alone in flight on the poller's only QP (so whatever its CQ holds is this operation's),
  // and untimed (nothing for a sweep to do, no cancellation to look at): posted and looked
  // for at once, and if already complete, finished without entering the queue's lists.
  // Nothing in flight also means nothing pending and the whole send queue free.
  if (in_flight_ == 0 && !failed_ && op->timeout.count() <= 0 && !op->stop &&
      poller_.attached_ == this && !next_attached_ && at_once_in_a_row_ < kMostAtOnceInARow) {
    op->wr.wr_id = reinterpret_cast<uintptr_t>(static_cast<Operation*>(op));
    if (post_alone(*op) == 0) [[likely]]
      return completed_at_once(op);
  }
  at_once_in_a_row_ = 0;
  submit_to(op, &AsyncQueuePair::posted_sends_, &AsyncQueuePair::pending_sends_,
            &AsyncQueuePair::send_room_);
  return false;  // suspends: the poller finishes it
}

bool AsyncQueuePair::completed_at_once(SendOperation* op) noexcept {
  ibv_wc wc;
  const int got = ibv_poll_cq(poller_.raw_cq_, 1, &wc);
  if (got == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == reinterpret_cast<uintptr_t>(op))
      [[likely]] {
    op->byte_len = wc.byte_len;
    op->result = detail::kNoError;
    ++at_once_in_a_row_;
    return true;
  }
  // Not yet (or failed, or the poll failed, as the poller will find): in flight as if posted
  // the usual way, and suspended.
  ++in_flight_;
  --send_room_;
  posted_sends_.push(op);
  at_once_in_a_row_ = 0;
  if (got == 1) {
    // As the poller would: this resumes the awaiter (already suspended) from here.
    auto* done = reinterpret_cast<Operation*>(wc.wr_id);
    done->on_completion(done, wc);
  }
  return false;
}

bool AsyncQueuePair::submit(RecvOperation* op) noexcept {
  submit_to(op, &AsyncQueuePair::posted_recvs_, &AsyncQueuePair::pending_recvs_,
            &AsyncQueuePair::recv_room_);
  return false;
}

void AsyncQueuePair::queue(List& pending, Operation* op) noexcept {
  pending.push(op);
  poller_.mark_dirty(this);
}

unsigned AsyncQueuePair::flush() noexcept {
  return flush_recvs() + flush_sends();
}

unsigned AsyncQueuePair::flush_sends() noexcept {
  ibv_send_wr* first = nullptr;
  ibv_send_wr** link = &first;
  unsigned posted = 0;
  unsigned since_signal = 0;
  while (send_room_ > 0 && pending_sends_.head) {
    auto* op = static_cast<SendOperation*>(pending_sends_.pop());
    --send_room_;
    // The last of a batch is always signalled, so every posted request is retired by a
    // later (or its own) completion: RC completes in order.
    const bool signal =
        ++since_signal >= signal_interval_ || send_room_ == 0 || !pending_sends_.head;
    if (signal) since_signal = 0;
    op->wr.wr_id = reinterpret_cast<uintptr_t>(static_cast<Operation*>(op));
    op->wr.next = nullptr;
    op->wr.send_flags = (op->wr.send_flags & ~unsigned{IBV_SEND_SIGNALED}) |
                        (signal ? unsigned{IBV_SEND_SIGNALED} : 0u);
    *link = &op->wr;
    link = &op->wr.next;
    posted_sends_.push(op);
    ++posted;
  }
  if (!first) return 0;
  ibv_send_wr* bad = nullptr;
  if (int err = ibv_post_send(raw_, first, &bad)) {
    // Requests before `bad` are with the device; the rest never were.
    for (ibv_send_wr* wr = bad; wr;) {
      ibv_send_wr* next = wr->next;
      auto* op = reinterpret_cast<Operation*>(wr->wr_id);
      posted_sends_.remove(op);
      ++send_room_;
      --posted;
      finish(op, verbs_error(err));
      wr = next;
    }
    fail_qp();
  }
  return posted;
}

unsigned AsyncQueuePair::flush_recvs() noexcept {
  ibv_recv_wr* first = nullptr;
  ibv_recv_wr** link = &first;
  unsigned posted = 0;
  while (recv_room_ > 0 && pending_recvs_.head) {
    auto* op = static_cast<RecvOperation*>(pending_recvs_.pop());
    --recv_room_;
    op->wr.wr_id = reinterpret_cast<uintptr_t>(static_cast<Operation*>(op));
    op->wr.next = nullptr;
    *link = &op->wr;
    link = &op->wr.next;
    posted_recvs_.push(op);
    ++posted;
  }
  if (!first) return 0;
  ibv_recv_wr* bad = nullptr;
  if (int err = ibv_post_recv(raw_, first, &bad)) {
    for (ibv_recv_wr* wr = bad; wr;) {
      ibv_recv_wr* next = wr->next;
      auto* op = reinterpret_cast<Operation*>(wr->wr_id);
      posted_recvs_.remove(op);
      ++recv_room_;
      --posted;
      finish(op, verbs_error(err));
      wr = next;
    }
  }
  return posted;
}

void AsyncQueuePair::fail_qp() noexcept {
  if (failed_) return;
  failed_ = true;
  // Flushes every posted request; their completions finish the awaiters.
  (void)qp_.to_error();
}

void AsyncQueuePair::send_completed(Operation* done, const ibv_wc& wc) noexcept {
  AsyncQueuePair& self = *done->qp;
  if (wc.status != IBV_WC_SUCCESS || self.posted_sends_.head != done) [[unlikely]]
    return self.retire_sends_through(done, wc);
  self.retire_oldest_send(done, wc);  // it retires only itself (depth 1, or signalled alone)
  self.finish(done, detail::kNoError);
}

void AsyncQueuePair::retire_sends_through(Operation* done, const ibv_wc& wc) noexcept {
  const bool ok = wc.status == IBV_WC_SUCCESS;
  for (;;) {
    Operation* op = posted_sends_.pop();
    RDMAKIT_REQUIRE(op != nullptr, "send completion for an operation that was not posted");
    ++send_room_;
    const bool last = op == done;
    std::error_code result = detail::kNoError;
    if (last && !ok)
      result =
          op->abandoned != Errc{} ? make_error_code(op->abandoned) : completion_error(wc.status);
    else if (!last && failed_)
      result = op->abandoned != Errc{} ? make_error_code(op->abandoned)
                                       : completion_error(IBV_WC_WR_FLUSH_ERR);
    if (last && !ok) failed_ = true;
    if (last) op->byte_len = wc.byte_len;
    finish(op, result);
    if (last) return;
  }
}

void AsyncQueuePair::recv_completed(Operation* done, const ibv_wc& wc) noexcept {
  AsyncQueuePair& self = *done->qp;
  if (self.posted_recvs_.head == done)
    self.posted_recvs_.pop();
  else
    RDMAKIT_REQUIRE(self.posted_recvs_.remove(done), "receive completion for an unposted receive");
  ++self.recv_room_;
  std::error_code result = detail::kNoError;
  if (wc.status != IBV_WC_SUCCESS) {
    self.failed_ = true;
    result =
        done->abandoned != Errc{} ? make_error_code(done->abandoned) : completion_error(wc.status);
  } else {
    done->byte_len = wc.byte_len;
    if (wc.wc_flags & IBV_WC_WITH_IMM) static_cast<RecvOperation*>(done)->imm = ntohl(wc.imm_data);
  }
  self.finish(done, result);
}

void AsyncQueuePair::sweep(Operation::Steady::time_point now) noexcept {
  cancel_requested_.store(false, std::memory_order_relaxed);
  auto reason = [now](const Operation* op) -> Errc {
    if (op->cancel_requested.load(std::memory_order_acquire)) return Errc::canceled;
    if (op->timeout.count() > 0 && op->deadline <= now) return Errc::timed_out;
    return Errc{};
  };
  // Not posted: the device never saw them, finish at once. Restart after each finish: the
  // resumed coroutine may queue more.
  for (List* list : {&pending_sends_, &pending_recvs_}) {
    for (Operation* op = list->head; op;) {
      const Errc why = reason(op);
      if (why == Errc{}) {
        op = op->next;
        continue;
      }
      list->remove(op);
      finish(op, make_error_code(why));
      op = list->head;
    }
  }
  // Posted: the device may still touch their buffers. Stop the QP; the flush completions
  // finish them with the reason.
  bool abandon = false;
  for (List* list : {&posted_sends_, &posted_recvs_}) {
    for (Operation* op = list->head; op; op = op->next) {
      const Errc why = reason(op);
      if (why == Errc{} || op->abandoned != Errc{}) continue;
      op->abandoned = why;
      abandon = true;
    }
  }
  if (abandon) fail_qp();
}

}  // namespace rdmakit

// The poll-mode data path: work requests queued into a batch and posted with one doorbell,
// only some of them signalled, send-queue room tracked for the caller. The application polls
// the CQ itself (CompletionQueue::poll, in batches) and hands this QP's send completions to
// retire(). No allocation after construction, nothing hidden: the fastest way to drive a QP.
//
//   PollQueuePair pq(qp);
//   while (pq.room() > 0 && more) pq.write(local, remote);
//   pq.post();                                   // one ibv_post_send for all of them
//   int n = cq.poll(completions);
//   for (auto& wc : first n) pq.retire(wc);      // frees the room of every request it covers
#pragma once

#include <cstdint>
#include <memory>
#include <system_error>

#include "rdmakit/buffer.hpp"
#include "rdmakit/error.hpp"
#include "rdmakit/queue_pair.hpp"

namespace rdmakit {

/// A connected QP driven by polling: requests are queued into a batch and posted with
/// one doorbell; completions are accounted with retire(). For one thread.
class PollQueuePair {
 public:
  /// `signal_interval`: every n-th request of a batch is signalled (and always the last); 0
  /// means a quarter of the send depth.
  explicit PollQueuePair(QueuePair& qp, uint32_t signal_interval = 0);

  /// Requests that may still be queued before the send queue is full.
  uint32_t room() const noexcept { return room_ - queued_; }
  /// Requests in the batch, not yet posted.
  uint32_t queued() const noexcept { return queued_; }
  /// Requests posted and not yet retired.
  uint32_t outstanding() const noexcept { return depth_ - room_; }

  /// Queue one request; false (nothing queued) when there is no room. `wr_id` comes back in
  /// the completion if the request is signalled.
  bool write(LocalBuffer local, RemoteBuffer remote, uint64_t wr_id = 0) noexcept {
    ibv_send_wr* wr = next_slot(IBV_WR_RDMA_WRITE, local, wr_id, true);
    if (wr) wr->wr.rdma = {remote.address(), remote.rkey()};
    return wr != nullptr;
  }
  /// Queues an RDMA READ of `remote` into `local`.
  bool read(LocalBuffer local, RemoteBuffer remote, uint64_t wr_id = 0) noexcept {
    ibv_send_wr* wr = next_slot(IBV_WR_RDMA_READ, local, wr_id, false);
    if (wr) wr->wr.rdma = {remote.address(), remote.rkey()};
    return wr != nullptr;
  }
  /// Queues a SEND of `local`.
  bool send(LocalBuffer local, uint64_t wr_id = 0) noexcept {
    return next_slot(IBV_WR_SEND, local, wr_id, true) != nullptr;
  }
  /// Queues a SEND carrying the immediate `imm`.
  bool send_with_imm(LocalBuffer local, uint32_t imm, uint64_t wr_id = 0) noexcept;
  /// Queues an RDMA WRITE that also consumes a peer receive carrying `imm`.
  bool write_with_imm(LocalBuffer local, RemoteBuffer remote, uint32_t imm,
                      uint64_t wr_id = 0) noexcept;
  /// Queues a compare-and-swap on the 8 bytes at `target`; the old value lands in `result`.
  bool compare_swap(LocalBuffer result, RemoteBuffer target, uint64_t expected, uint64_t desired,
                    uint64_t wr_id = 0) noexcept;
  /// Queues a fetch-and-add on the 8 bytes at `target`; the old value lands in `result`.
  bool fetch_add(LocalBuffer result, RemoteBuffer target, uint64_t add,
                 uint64_t wr_id = 0) noexcept;

  /// Posts everything queued with one doorbell. On failure nothing of the batch is queued
  /// any more and the verbs error is returned (requests before the failing one were posted
  /// and still retire through their completions).
  std::error_code post() noexcept;
  /// Accounts one send completion of this QP: returns how many requests it retired (the
  /// signalled one and the unsignalled ones before it). After a failed completion the QP is
  /// in ERROR and every outstanding request completes on its own: each then counts one.
  uint32_t retire(const ibv_wc& wc) noexcept {
    if (wc.status != IBV_WC_SUCCESS) [[unlikely]]
      return retire_failed();
    RDMAKIT_REQUIRE(covered_head_ != covered_tail_,
                    "PollQueuePair::retire without a signalled request");
    const uint32_t n = covered_[covered_head_++ & covered_mask_];
    room_ += n;
    return n;
  }
  /// True once a completion failed (the QP is in ERROR).
  bool failed() const noexcept { return failed_; }

 private:
  // The slots are chained once (slot i's `next` is slot i + 1); post() cuts the chain after
  // the last queued one for the call and mends it after. Whether a request is signalled is
  // decided as it is queued, so post() does not walk the batch.
  ibv_send_wr* next_slot(ibv_wr_opcode opcode, LocalBuffer local, uint64_t wr_id,
                         bool may_inline) noexcept {
    if (queued_ >= room_) [[unlikely]]
      return nullptr;
    const uint32_t i = queued_++;
    ibv_send_wr& wr = wrs_[i];
    sges_[i] = local.sge();
    wr.wr_id = wr_id;
    wr.num_sge = local.size() ? 1 : 0;
    wr.opcode = opcode;
    unsigned flags = may_inline && local.size() <= inline_size_ ? IBV_SEND_INLINE : 0;
    if (++unsignalled_run_ >= signal_interval_) {
      flags |= IBV_SEND_SIGNALED;
      close_run();
    }
    wr.send_flags = flags;
    return &wr;
  }
  /// The request just signalled retires the run of requests that ends with it.
  void close_run() noexcept {
    covered_[covered_tail_++ & covered_mask_] = unsignalled_run_;
    unsignalled_run_ = 0;
  }
  uint32_t retire_failed() noexcept;
  void forget_unposted(uint32_t posted) noexcept;

  QueuePair& qp_;
  ibv_qp* raw_;
  uint32_t depth_;
  uint32_t inline_size_;
  uint32_t signal_interval_;
  uint32_t room_;        ///< free slots of the send queue (posted requests occupy them)
  uint32_t queued_ = 0;  ///< requests in the batch, not yet posted
  /// Requests queued or posted since the last signalled one: the next signalled one covers
  /// them.
  uint32_t unsignalled_run_ = 0;
  bool failed_ = false;
  std::unique_ptr<ibv_send_wr[]> wrs_;
  std::unique_ptr<ibv_sge[]> sges_;
  /// Requests covered by each signalled request queued or in flight, oldest first: a ring of
  /// a power-of-two size >= depth_ (at most one signalled request per slot), indexed by
  /// free-running counters.
  std::unique_ptr<uint32_t[]> covered_;
  uint32_t covered_mask_;
  uint32_t covered_head_ = 0, covered_tail_ = 0;
};

}  // namespace rdmakit

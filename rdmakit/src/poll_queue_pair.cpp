#include "rdmakit/poll_queue_pair.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <bit>

namespace rdmakit {

PollQueuePair::PollQueuePair(QueuePair& qp, uint32_t signal_interval)
    : qp_(qp),
      raw_(qp.get()),
      depth_(qp.caps().send_depth),
      inline_size_(qp.caps().inline_size),
      signal_interval_(signal_interval ? signal_interval : std::max(1u, depth_ / 4)),
      room_(depth_),
      wrs_(new ibv_send_wr[depth_]()),
      sges_(new ibv_sge[depth_]()),
      covered_(new uint32_t[std::bit_ceil(depth_)]()),
      covered_mask_(std::bit_ceil(depth_) - 1) {
  RDMAKIT_REQUIRE(qp.ready(), "PollQueuePair over a queue pair that is not connected");
  RDMAKIT_REQUIRE(depth_ > 0, "PollQueuePair over a QP without send queue");
  for (uint32_t i = 0; i < depth_; ++i) {
    wrs_[i].sg_list = &sges_[i];
    wrs_[i].next = i + 1 < depth_ ? &wrs_[i + 1] : nullptr;
  }
}

bool PollQueuePair::send_with_imm(LocalBuffer local, uint32_t imm, uint64_t wr_id) noexcept {
  ibv_send_wr* wr = next_slot(IBV_WR_SEND_WITH_IMM, local, wr_id, true);
  if (wr) wr->imm_data = htonl(imm);
  return wr != nullptr;
}

bool PollQueuePair::write_with_imm(LocalBuffer local, RemoteBuffer remote, uint32_t imm,
                                   uint64_t wr_id) noexcept {
  ibv_send_wr* wr = next_slot(IBV_WR_RDMA_WRITE_WITH_IMM, local, wr_id, true);
  if (wr) {
    wr->wr.rdma = {remote.address(), remote.rkey()};
    wr->imm_data = htonl(imm);
  }
  return wr != nullptr;
}

bool PollQueuePair::compare_swap(LocalBuffer result, RemoteBuffer target, uint64_t expected,
                                 uint64_t desired, uint64_t wr_id) noexcept {
  RDMAKIT_REQUIRE(result.size() == 8 && target.size() == 8,
                  "compare_swap needs 8-byte local and remote buffers");
  ibv_send_wr* wr = next_slot(IBV_WR_ATOMIC_CMP_AND_SWP, result, wr_id, false);
  if (wr) wr->wr.atomic = {target.address(), expected, desired, target.rkey()};
  return wr != nullptr;
}

bool PollQueuePair::fetch_add(LocalBuffer result, RemoteBuffer target, uint64_t add,
                              uint64_t wr_id) noexcept {
  RDMAKIT_REQUIRE(result.size() == 8 && target.size() == 8,
                  "fetch_add needs 8-byte local and remote buffers");
  ibv_send_wr* wr = next_slot(IBV_WR_ATOMIC_FETCH_AND_ADD, result, wr_id, false);
  if (wr) wr->wr.atomic = {target.address(), add, 0, target.rkey()};
  return wr != nullptr;
}

std::error_code PollQueuePair::post() noexcept {
  if (queued_ == 0) return {};
  RDMAKIT_REQUIRE(qp_.ready(), "PollQueuePair::post on a queue pair that is not connected");
  ibv_send_wr& last = wrs_[queued_ - 1];
  if (unsignalled_run_ != 0) {  // the last of a batch is always signalled
    last.send_flags |= IBV_SEND_SIGNALED;
    close_run();
  }
  ibv_send_wr* const after = last.next;
  last.next = nullptr;
  ibv_send_wr* bad = nullptr;
  const int err = ibv_post_send(raw_, wrs_.get(), &bad);
  last.next = after;
  if (err) [[unlikely]] {
    forget_unposted(static_cast<uint32_t>(bad - wrs_.get()));
    return verbs_error(err);
  }
  room_ -= queued_;
  queued_ = 0;
  return {};
}

void PollQueuePair::forget_unposted(uint32_t posted) noexcept {
  // The ring's last entries are this batch's signalled requests, in order; the first of
  // them also covers the run carried over from before the batch.
  uint32_t signalled = 0, first_signalled = 0;
  for (uint32_t i = 0; i < queued_; ++i) {
    if (!(wrs_[i].send_flags & IBV_SEND_SIGNALED)) continue;
    if (signalled++ == 0) first_signalled = i;
  }
  const uint32_t batch_first = covered_tail_ - signalled;
  const uint32_t carried = covered_[batch_first & covered_mask_] - (first_signalled + 1);
  // Requests that reached the device but no signalled one of them covers are a run the
  // next signalled request covers; signalled requests that never reached it leave the ring.
  uint32_t kept = 0, run = carried;
  for (uint32_t i = 0; i < posted; ++i) {
    ++run;
    if (wrs_[i].send_flags & IBV_SEND_SIGNALED) {
      ++kept;
      run = 0;
    }
  }
  covered_tail_ = batch_first + kept;
  unsignalled_run_ = run;
  room_ -= posted;
  queued_ = 0;
}

uint32_t PollQueuePair::retire_failed() noexcept {
  // The QP is in ERROR: every outstanding request, signalled or not, completes on its own.
  failed_ = true;
  room_ = std::min(room_ + 1, depth_);
  return 1;
}

}  // namespace rdmakit

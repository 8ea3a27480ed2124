#include "rdmakit/poll_queue_pair.hpp"

#include <arpa/inet.h>

#include <algorithm>

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
      covered_(new uint32_t[depth_]()) {
  RDMAKIT_REQUIRE(qp.ready(), "PollQueuePair over a queue pair that is not connected");
  RDMAKIT_REQUIRE(depth_ > 0, "PollQueuePair over a QP without send queue");
}

ibv_send_wr* PollQueuePair::next_slot(ibv_wr_opcode opcode, LocalBuffer local,
                                      uint64_t wr_id) noexcept {
  if (queued_ >= room_) return nullptr;
  const uint32_t i = queued_++;
  ibv_send_wr& wr = wrs_[i];
  sges_[i] = local.sge();
  wr.wr_id = wr_id;
  wr.next = nullptr;
  wr.sg_list = &sges_[i];
  wr.num_sge = local.size() ? 1 : 0;
  wr.opcode = opcode;
  wr.send_flags = local.size() <= inline_size_ && opcode != IBV_WR_RDMA_READ &&
                          opcode != IBV_WR_ATOMIC_CMP_AND_SWP &&
                          opcode != IBV_WR_ATOMIC_FETCH_AND_ADD
                      ? IBV_SEND_INLINE
                      : 0;
  if (i > 0) wrs_[i - 1].next = &wr;
  return &wr;
}

bool PollQueuePair::write(LocalBuffer local, RemoteBuffer remote, uint64_t wr_id) noexcept {
  ibv_send_wr* wr = next_slot(IBV_WR_RDMA_WRITE, local, wr_id);
  if (wr) wr->wr.rdma = {remote.address(), remote.rkey()};
  return wr != nullptr;
}

bool PollQueuePair::read(LocalBuffer local, RemoteBuffer remote, uint64_t wr_id) noexcept {
  ibv_send_wr* wr = next_slot(IBV_WR_RDMA_READ, local, wr_id);
  if (wr) wr->wr.rdma = {remote.address(), remote.rkey()};
  return wr != nullptr;
}

bool PollQueuePair::send(LocalBuffer local, uint64_t wr_id) noexcept {
  return next_slot(IBV_WR_SEND, local, wr_id) != nullptr;
}

bool PollQueuePair::send_with_imm(LocalBuffer local, uint32_t imm, uint64_t wr_id) noexcept {
  ibv_send_wr* wr = next_slot(IBV_WR_SEND_WITH_IMM, local, wr_id);
  if (wr) wr->imm_data = htonl(imm);
  return wr != nullptr;
}

bool PollQueuePair::write_with_imm(LocalBuffer local, RemoteBuffer remote, uint32_t imm,
                                   uint64_t wr_id) noexcept {
  ibv_send_wr* wr = next_slot(IBV_WR_RDMA_WRITE_WITH_IMM, local, wr_id);
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
  ibv_send_wr* wr = next_slot(IBV_WR_ATOMIC_CMP_AND_SWP, result, wr_id);
  if (wr) wr->wr.atomic = {target.address(), expected, desired, target.rkey()};
  return wr != nullptr;
}

bool PollQueuePair::fetch_add(LocalBuffer result, RemoteBuffer target, uint64_t add,
                              uint64_t wr_id) noexcept {
  RDMAKIT_REQUIRE(result.size() == 8 && target.size() == 8,
                  "fetch_add needs 8-byte local and remote buffers");
  ibv_send_wr* wr = next_slot(IBV_WR_ATOMIC_FETCH_AND_ADD, result, wr_id);
  if (wr) wr->wr.atomic = {target.address(), add, 0, target.rkey()};
  return wr != nullptr;
}

std::error_code PollQueuePair::post() noexcept {
  if (queued_ == 0) return {};
  RDMAKIT_REQUIRE(qp_.ready(), "PollQueuePair::post on a queue pair that is not connected");
  // Mark the signalled ones; each records how many requests its completion retires.
  uint32_t run = unsignalled_run_;
  for (uint32_t i = 0; i < queued_; ++i) {
    ++run;
    const bool signal = run >= signal_interval_ || i + 1 == queued_;
    wrs_[i].send_flags = signal ? wrs_[i].send_flags | IBV_SEND_SIGNALED
                                : wrs_[i].send_flags & ~unsigned{IBV_SEND_SIGNALED};
    if (signal) {
      covered_[(covered_head_ + covered_count_++) % depth_] = run;
      run = 0;
    }
  }
  unsignalled_run_ = 0;
  ibv_send_wr* bad = nullptr;
  const int err = ibv_post_send(raw_, wrs_.get(), &bad);
  const uint32_t posted = err ? static_cast<uint32_t>(bad - wrs_.get()) : queued_;
  if (err) {
    // Forget the signalled entries of requests that never reached the device; requests
    // posted after the last signalled one that did are retired by nothing: count them as
    // an unsignalled run the next signalled request covers.
    uint32_t counted = 0, signalled = 0;
    for (uint32_t i = 0; i < posted; ++i) {
      ++counted;
      if (wrs_[i].send_flags & IBV_SEND_SIGNALED) {
        ++signalled;
        counted = 0;
      }
    }
    uint32_t all_signalled = 0;
    for (uint32_t i = 0; i < queued_; ++i)
      all_signalled += (wrs_[i].send_flags & IBV_SEND_SIGNALED) ? 1 : 0;
    covered_count_ -= all_signalled - signalled;
    unsignalled_run_ = counted;
  }
  room_ -= posted;
  queued_ = 0;
  return err ? verbs_error(err) : std::error_code{};
}

uint32_t PollQueuePair::retire(const ibv_wc& wc) noexcept {
  if (wc.status != IBV_WC_SUCCESS) {
    // The QP is in ERROR: every outstanding request, signalled or not, completes on its own.
    failed_ = true;
    room_ = std::min(room_ + 1, depth_);
    return 1;
  }
  RDMAKIT_REQUIRE(covered_count_ > 0, "PollQueuePair::retire without a signalled request");
  const uint32_t n = covered_[covered_head_];
  covered_head_ = (covered_head_ + 1) % depth_;
  --covered_count_;
  room_ += n;
  return n;
}

}  // namespace rdmakit

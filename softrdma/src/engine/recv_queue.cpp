#include "engine/recv_queue.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "engine/completion_queue.hpp"

namespace softrdma {
namespace {
uint32_t stride_for(uint32_t max_sge) {
  uint32_t bytes = static_cast<uint32_t>(sizeof(RecvWqe) + sizeof(ibv_sge) * max_sge);
  return (bytes + 15) & ~15u;
}
}  // namespace

uint32_t recv_queue_capacity(uint32_t wanted) {
  return std::bit_ceil(std::max<uint32_t>(wanted, 1));
}

size_t recv_queue_bytes(uint32_t wanted, uint32_t max_sge) {
  return sizeof(RecvQueueShared) + size_t{stride_for(max_sge)} * recv_queue_capacity(wanted);
}

void recv_queue_init(RecvQueueShared* rq, uint32_t wanted, uint32_t max_sge) {
  rq->capacity = recv_queue_capacity(wanted);
  rq->max_sge = max_sge;
  rq->stride = stride_for(max_sge);
}

int recv_queue_post(RecvQueueShared* rq, const ibv_recv_wr& wr) {
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > rq->max_sge) return EINVAL;
  SharedBiasedLock::Guard guard(rq->post_lock);
  const uint64_t tail = rq->tail.load(std::memory_order_relaxed);
  RecvWqe* w = rq->wqe(tail);
  // Free: never used (first lap), or what the last lap posted here has been taken.
  const uint64_t was = w->stamp.load(std::memory_order_acquire);
  if (was != (tail < rq->capacity ? 0 : RecvWqe::kTaken | (tail - rq->capacity + 1))) return ENOMEM;
  w->wr_id = wr.wr_id;
  w->num_sge = static_cast<uint32_t>(wr.num_sge);
  if (wr.num_sge == 1)
    w->sge()[0] = wr.sg_list[0];  // the common receive, without a call
  else if (wr.num_sge)
    std::memcpy(w->sge(), wr.sg_list, sizeof(ibv_sge) * wr.num_sge);
  w->stamp.store(tail + 1, std::memory_order_release);
  rq->tail.store(tail + 1, std::memory_order_release);
  return 0;
}

void srq_limit_check(PeerArena& owner, RecvQueueShared* rq) {
  if (rq->limit && recv_queue_waiting(rq) < rq->limit) {
    rq->limit = 0;
    async_push(owner, rq->context_offset, IBV_EVENT_SRQ_LIMIT_REACHED, rq->owner_handle);
  }
}

}  // namespace softrdma

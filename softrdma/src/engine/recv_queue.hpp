// Receive queues in shared memory: the owner posts work requests, a peer delivering a
// message takes the oldest one.
#pragma once

#include <infiniband/verbs.h>
#include <cstddef>
#include <cstdint>

#include "engine/arena.hpp"
#include "engine/shared_layout.hpp"

namespace softrdma {

/// The slots a queue asked to hold `wanted` receives has: at least one, and a power of two,
/// as NICs round their rings (a slot is then found with a mask, not a 64-bit division on
/// every post and every take).
uint32_t recv_queue_capacity(uint32_t wanted);
/// Bytes of arena a queue asked to hold `wanted` receives of `max_sge` SGEs needs.
size_t recv_queue_bytes(uint32_t wanted, uint32_t max_sge);
/// Lays a queue out in freshly allocated (zeroed) arena memory: no slot holds a stamp yet.
/// Its capacity is recv_queue_capacity(wanted), which the verbs report back.
void recv_queue_init(RecvQueueShared* rq, uint32_t wanted, uint32_t max_sge);

/// Appends a receive request; ENOMEM when full, EINVAL with too many SGEs.
int recv_queue_post(RecvQueueShared* rq, const ibv_recv_wr& wr);

/// The oldest request, or null if none is posted. The caller holds rq->lock, and reads the
/// request before it calls recv_queue_pop, which lets the owner reuse its slot.
inline RecvWqe* recv_queue_front(RecvQueueShared* rq) {
  const uint64_t head = rq->head.load(std::memory_order_relaxed);
  RecvWqe* w = rq->wqe(head);
  return w->stamp.load(std::memory_order_acquire) == head + 1 ? w : nullptr;
}
inline void recv_queue_pop(RecvQueueShared* rq) {
  const uint64_t head = rq->head.load(std::memory_order_relaxed);
  rq->wqe(head)->stamp.store(RecvWqe::kTaken | (head + 1), std::memory_order_release);
  rq->head.store(head + 1, std::memory_order_release);
}

/// After a request was taken from an SRQ: raises IBV_EVENT_SRQ_LIMIT_REACHED in the owner's
/// context, once, if a limit is armed and fewer requests than it wait (caller holds rq->lock).
void srq_limit_check(PeerArena& owner, RecvQueueShared* rq);

/// Requests posted and not yet taken (caller holds rq->lock).
inline uint64_t recv_queue_waiting(RecvQueueShared* rq) {
  return rq->tail.load(std::memory_order_acquire) - rq->head.load(std::memory_order_relaxed);
}

/// Drops every request not yet taken (caller holds rq->lock).
inline void recv_queue_discard(RecvQueueShared* rq) {
  while (recv_queue_front(rq)) recv_queue_pop(rq);
}

}  // namespace softrdma

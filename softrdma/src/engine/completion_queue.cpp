#include "engine/completion_queue.hpp"

#include <vector>

#include "wire/socket_io.hpp"

namespace softrdma {

size_t cq_shared_bytes(uint32_t capacity) {
  return sizeof(CqShared) + sizeof(CqSlot) * capacity;
}

namespace {

void fill(CqSlot& slot, const CqEntry& entry, uint64_t position) {
  slot.entry = entry;
  slot.stamp.store(position + 1, std::memory_order_release);
}

}  // namespace

bool cq_relay(CqShared* cq, uint32_t capacity, CqSlot* into) {
  const CqShared::Ring from = cq->ring_now(std::memory_order_relaxed);
  const uint64_t head = cq->head.load(std::memory_order_acquire);
  const uint64_t tail = cq->tail;
  if (tail - head > capacity) return false;
  std::vector<CqEntry> waiting;
  waiting.reserve(tail - head);
  for (uint64_t i = head; i < tail; ++i) waiting.push_back(from.slots[i & from.mask].entry);
  // Positions keep their numbers. Any stamp left in a slot names a position before the
  // tail, so none can pass for a position still to come. A new ring is complete before a
  // poll can see it; a poll still reading the old one finds there only entries it holds too.
  for (uint64_t i = head; i < tail; ++i) fill(into[i & (capacity - 1)], waiting[i - head], i);
  cq->publish_ring(into, capacity);
  return true;
}

void signal_eventfd(PeerArena& owner, int owner_fd) {
  if (owner_fd < 0) return;
  int fd = owner.import_fd(owner_fd);
  if (fd >= 0) wire::notify_eventfd(fd);
}

void async_push(PeerArena& owner, uint64_t context_offset, ibv_event_type type, uint64_t handle) {
  auto* ctx = owner.at<ContextShared>(context_offset);
  {
    ProcessLockGuard guard(ctx->lock);
    if (ctx->tail - ctx->head >= ContextShared::kAsyncCapacity) return;  // full: drop
    ctx->ring[ctx->tail % ContextShared::kAsyncCapacity] =
        AsyncEntry{static_cast<uint32_t>(type), 0, handle};
    ++ctx->tail;
  }
  signal_eventfd(owner, ctx->async_eventfd);
}

namespace {

// Appends under the producer lock and wakes an armed channel. `owner()` names the CQ's
// owner; it is only needed off the common path (an overrun, a wake-up), so a producer in
// the owner's own process does not pay for finding its arena on every completion.
template <class OwnerOf>
bool push(OwnerOf owner, CqShared* cq, const CqEntry& entry, bool solicited) {
  {
    SharedBiasedLock::Guard guard(cq->producer_lock);
    const uint64_t tail = cq->tail;
    const CqShared::Ring ring = cq->ring_now(std::memory_order_relaxed);
    // The consumer's line is read only when the ring looks full from what was last seen.
    if (tail - cq->head_seen > ring.mask) {
      cq->head_seen = cq->head.load(std::memory_order_acquire);
      if (tail - cq->head_seen > ring.mask) {
        if (cq->overrun.exchange(1) == 0)
          async_push(owner(), cq->context_offset, IBV_EVENT_CQ_ERR, cq->owner_handle);
        return false;
      }
    }
    fill(ring.slots[tail & ring.mask], entry, tail);
    cq->tail = tail + 1;
  }
  // Without a completion channel (set at creation, never changed) nobody can wait for an
  // event: a busy-polling application pays no second locked instruction per completion.
  if (cq->channel_eventfd < 0) return true;
  // An RMW, paired with the one in req_notify_cq: either it sees the CQ armed, or the
  // arming thread's next poll sees this entry. Plain store-then-load on both sides could
  // each miss the other (store buffering) and lose the wake-up.
  const uint32_t armed = cq->armed.fetch_add(0, std::memory_order_acq_rel);
  const bool wake = armed == kCqArmedAll ||
                    (armed == kCqArmedSolicited && (solicited || entry.status != IBV_WC_SUCCESS));
  if (wake && cq->armed.exchange(kCqDisarmed) != kCqDisarmed) {
    cq->events_pending.fetch_add(1, std::memory_order_release);
    signal_eventfd(owner(), cq->channel_eventfd);
  }
  return true;
}

}  // namespace

bool cq_push(PeerArena& owner, CqShared* cq, const CqEntry& entry, bool solicited) {
  return push([&owner]() -> PeerArena& { return owner; }, cq, entry, solicited);
}

bool cq_push_own(PeerArena& (*self)(), CqShared* cq, const CqEntry& entry, bool solicited) {
  return push(self, cq, entry, solicited);
}

void cq_purge_qp(CqShared* cq, uint32_t qpn) {
  SharedBiasedLock::Guard guard(cq->producer_lock);  // no producer appends meanwhile
  const uint64_t head = cq->head.load(std::memory_order_acquire);
  const uint64_t tail = cq->tail;
  const CqShared::Ring ring = cq->ring_now(std::memory_order_relaxed);
  // Kept entries slide toward the tail, so the ring's newest end stays where producers
  // write; the head then skips what was removed.
  uint64_t kept_from = tail;
  for (uint64_t i = tail; i-- > head;) {
    const CqEntry e = ring.slots[i & ring.mask].entry;
    if (e.qp_num != qpn) {
      --kept_from;
      fill(ring.slots[kept_from & ring.mask], e, kept_from);
    }
  }
  cq->head.store(kept_from, std::memory_order_release);
}

}  // namespace softrdma

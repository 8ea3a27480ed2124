// Completion rings shared between the CQ's owner (the only consumer) and any producer:
// the owner's own send path, or a peer delivering a receive completion.
#pragma once

#include <algorithm>

#include <cstddef>
#include <cstdint>

#include "engine/arena.hpp"
#include "engine/shared_layout.hpp"

namespace softrdma {

/// Bytes of arena needed for a CQ of `capacity` entries.
size_t cq_shared_bytes(uint32_t capacity);

/// Re-lays the waiting completions for a new capacity into the ring at `into`, the current
/// one or a zeroed one with room for `capacity` slots, and makes it the CQ's ring (caller
/// holds producer_lock). False, changing nothing, if more are waiting than `capacity`.
bool cq_relay(CqShared* cq, uint32_t capacity, CqSlot* into);

/// Appends a completion and wakes the owner's completion channel if the CQ is armed for it.
/// Returns false on overrun (the entry is dropped and IBV_EVENT_CQ_ERR is raised).
bool cq_push(PeerArena& owner, CqShared* cq, const CqEntry& entry, bool solicited);
/// cq_push for a CQ of this process: `self` finds its arena, only if it is needed.
bool cq_push_own(PeerArena& (*self)(), CqShared* cq, const CqEntry& entry, bool solicited);

/// Takes up to `max` completions one at a time: `take(i, entry)` reads the i-th, the head
/// then moves past it (its slot is the producers' again) and `taken(i)` runs; returns how
/// many. Owner only, one thread at a time (the caller holds the CQ's poll lock).
template <class Take, class Taken>
[[gnu::always_inline]] inline int cq_take(CqShared* cq, int max, Take take, Taken taken) {
  const uint64_t head = cq->head.load(std::memory_order_relaxed);
  const CqShared::Ring ring = cq->ring_now(std::memory_order_acquire);
  int n = 0;
  for (; n < max; ++n) {
    CqSlot& slot = ring.slots[(head + n) & ring.mask];
    if (slot.stamp.load(std::memory_order_acquire) != head + n + 1) break;
    // Producers never overwrite a slot before the head moves past it.
    take(n, slot.entry);
    cq->head.store(head + n + 1, std::memory_order_release);
    taken(n);
  }
  return n;
}

/// Removes the completions of QP `qpn` that are not yet polled, keeping the others in
/// order (a QP moved to RESET leaves nothing behind, as on a NIC). Owner only; concurrent
/// polls of the same CQ are the caller's race, as with a NIC's driver.
void cq_purge_qp(CqShared* cq, uint32_t qpn);

/// Raises an asynchronous event in the owner's context.
void async_push(PeerArena& owner, uint64_t context_offset, ibv_event_type type, uint64_t handle);

/// Makes an eventfd owned by `owner` readable (one more count).
void signal_eventfd(PeerArena& owner, int owner_fd);

}  // namespace softrdma

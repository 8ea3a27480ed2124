// Completion rings shared between the CQ's owner (the only consumer) and any producer:
// the owner's own send path, or a peer delivering a receive completion.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/arena.hpp"
#include "engine/shared_layout.hpp"

namespace softrdma {

/// Bytes of arena needed for a CQ of `capacity` entries.
size_t cq_shared_bytes(uint32_t capacity);

/// Appends a completion and wakes the owner's completion channel if the CQ is armed for it.
/// Returns false on overrun (the entry is dropped and IBV_EVENT_CQ_ERR is raised).
bool cq_push(PeerArena& owner, CqShared* cq, const CqEntry& entry, bool solicited);

/// Takes up to `max` completions (owner only; safe between the owner's threads).
int cq_take(CqShared* cq, CqEntry* out, int max);

/// Raises an asynchronous event in the owner's context.
void async_push(PeerArena& owner, uint64_t context_offset, ibv_event_type type, uint64_t handle);

/// Makes an eventfd owned by `owner` readable (one more count).
void signal_eventfd(PeerArena& owner, int owner_fd);

}  // namespace softrdma

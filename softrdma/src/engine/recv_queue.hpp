// Receive queues in shared memory: the owner posts work requests, a peer delivering a
// message takes the oldest one.
#pragma once

#include <infiniband/verbs.h>
#include <cstddef>
#include <cstdint>

#include "engine/arena.hpp"
#include "engine/shared_layout.hpp"

namespace softrdma {

size_t recv_queue_bytes(uint32_t capacity, uint32_t max_sge);
void recv_queue_init(RecvQueueShared* rq, uint32_t capacity, uint32_t max_sge);

/// Appends a receive request; ENOMEM when full, EINVAL with too many SGEs.
int recv_queue_post(RecvQueueShared* rq, const ibv_recv_wr& wr);

/// Number of receive requests waiting.
uint32_t recv_queue_depth(RecvQueueShared* rq);

}  // namespace softrdma

// The requester half of the transport: the send queue of a QP, executed in order.
#pragma once

#include <infiniband/verbs.h>
#include <chrono>
#include <optional>

#include "verbs/objects.hpp"

namespace softrdma {

/// Posts one work request (the caller holds qp.sq_mutex). Returns 0 or the errno that
/// ibv_post_send reports for it.
int requester_post(Qp& qp, const ibv_send_wr& wr);

/// The errno ibv_post_send would report for `wr` in the QP's current state, other than a
/// full send queue; 0 when it would be accepted (the caller holds qp.sq_mutex).
int requester_check(const Qp& qp, const ibv_send_wr& wr);

/// The send queue has room for `count` more work requests (the caller holds qp.sq_mutex).
bool requester_has_room(const Qp& qp, size_t count);

/// Retries the QP's blocked work; returns when to try again, if anything is still blocked.
std::optional<std::chrono::steady_clock::time_point> requester_progress(Qp& qp);

/// Completes every blocked work request with IBV_WC_WR_FLUSH_ERR (QP in ERROR).
void requester_flush(Qp& qp);

}  // namespace softrdma

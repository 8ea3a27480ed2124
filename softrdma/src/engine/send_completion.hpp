// How the requester completes work requests: successes (when signalled), errors (always,
// moving the QP to ERROR), flushes, and the retry rules for RNR and unanswered requests.
#pragma once

#include <infiniband/verbs.h>
#include <chrono>

#include "engine/progress.hpp"
#include "verbs/objects.hpp"

namespace softrdma {

bool is_atomic(ibv_wr_opcode op);
uint64_t payload_length(const SendWork& w);

/// Pushes the completion of the work request `wr_id` at send-queue position `seq` into the
/// QP's send CQ (retiring it and every unsignalled one before it when polled).
void push_send_completion(Qp& qp, uint64_t wr_id, ibv_wr_opcode op, ibv_wc_status status,
                          uint32_t byte_len, uint64_t seq);
/// Completes `w`: an error always produces a completion, a success only when signalled.
void complete(Qp& qp, const SendWork& w, ibv_wc_status status);
/// Completes `w` with an error and moves the QP to ERROR.
void fail(Qp& qp, const SendWork& w, ibv_wc_status status);
/// Completes `w` with IBV_WC_WR_FLUSH_ERR.
void flush_one(Qp& qp, const SendWork& w);

/// The peer answered "receiver not ready": true if `w` failed for good (retries
/// exhausted), else `w.next_attempt` says when to retry.
bool rnr_exhausted(Qp& qp, SendWork& w, uint8_t rnr_timer, Clock::time_point now);
/// When a request sent or answered now is given up if no answer comes: the QP's ACK
/// timeout times its retry count plus one (never, for timeout 0); for an unreliable QP,
/// when it counts as lost.
Clock::time_point answer_deadline(const Qp& qp, Clock::time_point now);

/// The peer did not answer: true if `w` failed for good (timeout budget spent).
bool retries_exhausted(Qp& qp, SendWork& w, Clock::time_point now);

}  // namespace softrdma

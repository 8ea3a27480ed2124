#include "engine/send_completion.hpp"

#include "engine/completion_queue.hpp"
#include "engine/qp_types.hpp"
#include "engine/responder.hpp"
#include "engine/transmit.hpp"

namespace softrdma {
namespace {

// IBTA table of RNR NAK timer values, in microseconds; index 0 is the longest.
constexpr uint32_t kRnrDelayUs[32] = {655360, 10,    20,    30,     40,     60,     80,     120,
                                      160,    240,   320,   480,    640,    960,    1280,   1920,
                                      2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
                                      40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};

// Local ACK timeout: 4.096 us * 2^timeout; 0 means wait forever.
Clock::duration ack_timeout(uint8_t timeout) {
  return std::chrono::nanoseconds(4096ll << std::min<uint8_t>(timeout, 31));
}

ibv_wc_opcode wc_opcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return IBV_WC_FETCH_ADD;
    case IBV_WR_ATOMIC_WRITE:
      return IBV_WC_ATOMIC_WRITE;
    case IBV_WR_BIND_MW:
      return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV:
      return IBV_WC_LOCAL_INV;
    default:
      return IBV_WC_SEND;
  }
}

bool signaled(const Qp& qp, const SendWork& w) {
  return qp.sq_sig_all || (w.send_flags & IBV_SEND_SIGNALED);
}

}  // namespace

bool is_atomic(ibv_wr_opcode op) {
  return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

uint64_t payload_length(const SendWork& w) {
  if (!w.inline_data.empty()) return w.inline_data.size();
  uint64_t n = 0;
  for (int i = 0; i < w.sges.count; ++i) n += w.sges.at[i].length;
  return n;
}

void push_send_completion(Qp& qp, uint64_t wr_id, ibv_wr_opcode op, ibv_wc_status status,
                          uint32_t byte_len, uint64_t seq) {
  CqEntry e{};
  e.wr_id = wr_id;
  e.status = status;
  e.opcode = wc_opcode(op);
  e.qp_num = qp.qpx.qp_base.qp_num;
  e.byte_len = byte_len;
  e.send_seq = seq;
  // Send completions are unsolicited: they wake a solicited-only CQ only when they fail.
  cq_push_own(self_peer, qp.send_cq->shared, e, false);
}

void complete(Qp& qp, const SendWork& w, ibv_wc_status status) {
  if (status == IBV_WC_SUCCESS && !signaled(qp, w)) return;  // retired by a later one
  uint32_t byte_len = 0;
  if (w.opcode == IBV_WR_RDMA_READ || is_atomic(w.opcode))
    byte_len = static_cast<uint32_t>(is_atomic(w.opcode) ? 8 : payload_length(w));
  push_send_completion(qp, w.wr_id, w.opcode, status, byte_len, w.seq);
}

void fail(Qp& qp, const SendWork& w, ibv_wc_status status) {
  release_payload(w);
  // In ERROR before the error completion can be polled (an application that polls it from
  // another thread and then queries the QP sees ERROR, as on a NIC); the receive queue's
  // flushed completions come after it.
  const bool entered = qp_mark_error(qp.shared);
  complete(qp, w, status);
  if (entered) qp_finish_error(self_peer(), qp.shared, 0);
}

void flush_one(Qp& qp, const SendWork& w) {
  release_payload(w);
  push_send_completion(qp, w.wr_id, w.opcode, IBV_WC_WR_FLUSH_ERR, 0, w.seq);
}

bool rnr_exhausted(Qp& qp, SendWork& w, uint8_t rnr_timer, Clock::time_point now) {
  const uint8_t budget = qp.attr.rnr_retry;  // 7 = retry forever
  if (budget != 7 && w.rnr_attempts >= budget) {
    fail(qp, w, IBV_WC_RNR_RETRY_EXC_ERR);
    return true;
  }
  ++w.rnr_attempts;
  w.next_attempt = now + std::chrono::microseconds(kRnrDelayUs[rnr_timer & 31]);
  return false;
}

Clock::time_point answer_deadline(const Qp& qp, Clock::time_point now) {
  // An unreliable QP has no ACK timeout: a message whose answer does not come is lost.
  constexpr auto kUnreliableAnswerWait = std::chrono::milliseconds(500);
  if (!is_reliable(qp.qpx.qp_base.qp_type)) return now + kUnreliableAnswerWait;
  if (qp.attr.timeout == 0) return Clock::time_point::max();
  return now + ack_timeout(qp.attr.timeout) * (qp.attr.retry_cnt + 1);
}

bool retries_exhausted(Qp& qp, SendWork& w, Clock::time_point now) {
  const auto interval = ack_timeout(qp.attr.timeout);
  if (w.give_up == Clock::time_point{}) w.give_up = answer_deadline(qp, now);
  if (now >= w.give_up) {
    fail(qp, w, IBV_WC_RETRY_EXC_ERR);
    return true;
  }
  // Retried at the ACK timeout, at most 10 ms apart; with no timeout (0: wait for ever),
  // every 10 ms rather than a busy loop of connection attempts.
  constexpr auto kLongestRetryInterval = std::chrono::milliseconds(10);
  w.next_attempt =
      now + (qp.attr.timeout == 0 ? kLongestRetryInterval
                                  : std::min<Clock::duration>(interval, kLongestRetryInterval));
  return false;
}

}  // namespace softrdma

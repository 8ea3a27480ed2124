#include "engine/requester.hpp"

#include <cerrno>
#include <cstring>

#include "engine/completion_queue.hpp"
#include "engine/progress.hpp"
#include "engine/responder.hpp"
#include "verbs/device_limits.hpp"

namespace softrdma {
namespace {

using std::chrono::microseconds;
using Kind = ResponderReply::Kind;

enum class Outcome { kCompleted, kBlocked };

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
    default:
      return IBV_WC_SEND;
  }
}

bool is_atomic(ibv_wr_opcode op) {
  return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

bool signaled(const Qp& qp, const SendWork& w) {
  return qp.sq_sig_all || (w.send_flags & IBV_SEND_SIGNALED);
}

uint64_t payload_length(const SendWork& w) {
  if (!w.inline_data.empty()) return w.inline_data.size();
  uint64_t n = 0;
  for (int i = 0; i < w.num_sge; ++i) n += w.sge[i].length;
  return n;
}

void complete(Qp& qp, const SendWork& w, ibv_wc_status status) {
  // Errors always complete; successes only when signalled (later ones retire the rest).
  if (status == IBV_WC_SUCCESS && !signaled(qp, w)) return;
  CqEntry e{};
  e.wr_id = w.wr_id;
  e.status = status;
  e.opcode = wc_opcode(w.opcode);
  e.qp_num = qp.qpx.qp_base.qp_num;
  if (w.opcode == IBV_WR_RDMA_READ || is_atomic(w.opcode))
    e.byte_len = static_cast<uint32_t>(is_atomic(w.opcode) ? 8 : payload_length(w));
  e.send_seq = w.seq;
  cq_push(self_peer(), qp.send_cq->shared, e, true);
}

void fail(Qp& qp, const SendWork& w, ibv_wc_status status) {
  complete(qp, w, status);
  qp_enter_error(self_peer(), qp.shared, 0);
}

bool find_peer(Qp& qp, const SendWork& w, TargetQp& scratch, TargetQp*& target) {
  if (qp.qpx.qp_base.qp_type == IBV_QPT_UD) {
    target = &scratch;
    return resolve_local_qp(w.remote_qpn, scratch);
  }
  target = &qp.peer;
  if (qp.peer.slot && qp.peer.current()) return true;
  return qp.peer_on_this_host && resolve_local_qp(qp.attr.dest_qp_num, qp.peer);
}

Outcome execute(Qp& qp, SendWork& w) {
  const bool ud = qp.qpx.qp_base.qp_type == IBV_QPT_UD;
  // Gather the local side: inline bytes, or registered memory checked against our PD.
  PinnedRanges local;
  iovec inline_iov{w.inline_data.data(), w.inline_data.size()};
  const iovec* iov = &inline_iov;
  int iov_count = w.inline_data.empty() ? 0 : 1;
  if (w.inline_data.empty() && !(w.send_flags & IBV_SEND_INLINE)) {
    const uint32_t need =
        (w.opcode == IBV_WR_RDMA_READ || is_atomic(w.opcode)) ? IBV_ACCESS_LOCAL_WRITE : 0;
    if (!pin_sge_list(local, w.sge, w.num_sge, self_process(), qp.pd_id, need)) {
      fail(qp, w, IBV_WC_LOC_PROT_ERR);
      return Outcome::kCompleted;
    }
    iov = local.iov();
    iov_count = local.count();
  }
  const uint64_t length = is_atomic(w.opcode) ? sizeof(uint64_t) : payload_length(w);
  if (length > limits::kMaxMsgSize || (ud && length > limits::kMtuBytes) ||
      (is_atomic(w.opcode) && payload_length(w) < sizeof(uint64_t))) {
    fail(qp, w, IBV_WC_LOC_LEN_ERR);
    return Outcome::kCompleted;
  }

  TargetQp scratch;
  TargetQp* target = nullptr;
  ResponderReply reply{Kind::kNoAnswer, IBV_WC_SUCCESS, 0};
  if (find_peer(qp, w, scratch, target)) {
    InboundRequest r;
    r.opcode = w.opcode;
    r.qp_type = qp.qpx.qp_base.qp_type;
    r.src_qpn = qp.qpx.qp_base.qp_num;
    const Gid sgid = qp.ctx->gids.at(qp.attr.ah_attr.grh.sgid_index);
    std::memcpy(r.src_gid, sgid.data(), 16);
    std::memcpy(r.dst_gid, ud ? w.dgid.data() : qp.attr.ah_attr.grh.dgid.raw, 16);
    r.solicited = w.send_flags & IBV_SEND_SOLICITED;
    r.has_imm = w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    r.imm_data = w.imm_data;
    r.remote_addr = w.remote_addr;
    r.rkey = w.rkey;
    r.compare_add = w.compare_add;
    r.swap = w.swap;
    r.qkey = w.remote_qkey;
    r.local = iov;
    r.local_count = iov_count;
    r.length = length;
    reply = respond(*target, r);
  } else if (ud) {
    reply = {Kind::kDone, IBV_WC_SUCCESS, 0};  // UD to nowhere is lost, not an error
  }

  const auto now = Clock::now();
  switch (reply.kind) {
    case Kind::kDone:
      if (reply.status == IBV_WC_SUCCESS)
        complete(qp, w, IBV_WC_SUCCESS);
      else
        fail(qp, w, reply.status);
      return Outcome::kCompleted;
    case Kind::kRnr: {
      const uint8_t budget = qp.attr.rnr_retry;  // 7 = retry forever
      if (budget != 7 && w.rnr_attempts >= budget) {
        fail(qp, w, IBV_WC_RNR_RETRY_EXC_ERR);
        return Outcome::kCompleted;
      }
      ++w.rnr_attempts;
      w.next_attempt = now + microseconds(kRnrDelayUs[reply.rnr_timer & 31]);
      return Outcome::kBlocked;
    }
    case Kind::kNoAnswer: {
      const auto interval = ack_timeout(qp.attr.timeout);
      if (w.give_up == Clock::time_point{})
        w.give_up = qp.attr.timeout == 0 ? Clock::time_point::max()
                                         : now + interval * (qp.attr.retry_cnt + 1);
      if (now >= w.give_up) {
        fail(qp, w, IBV_WC_RETRY_EXC_ERR);
        return Outcome::kCompleted;
      }
      w.next_attempt = now + std::min<Clock::duration>(interval, std::chrono::milliseconds(10));
      return Outcome::kBlocked;
    }
  }
  return Outcome::kCompleted;
}

void flush_one(Qp& qp, const SendWork& w) {
  CqEntry e{};
  e.wr_id = w.wr_id;
  e.status = IBV_WC_WR_FLUSH_ERR;
  e.opcode = wc_opcode(w.opcode);
  e.qp_num = qp.qpx.qp_base.qp_num;
  e.send_seq = w.seq;
  cq_push(self_peer(), qp.send_cq->shared, e, true);
}

SendWork make_work(const Qp& qp, const ibv_send_wr& wr) {
  SendWork w;
  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.send_flags = wr.send_flags;
  w.imm_data = wr.imm_data;
  w.num_sge = wr.num_sge;
  std::memcpy(w.sge, wr.sg_list, sizeof(ibv_sge) * static_cast<size_t>(wr.num_sge));
  if (wr.opcode == IBV_WR_RDMA_WRITE || wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
      wr.opcode == IBV_WR_RDMA_READ) {
    w.remote_addr = wr.wr.rdma.remote_addr;
    w.rkey = wr.wr.rdma.rkey;
  } else if (is_atomic(wr.opcode)) {
    w.remote_addr = wr.wr.atomic.remote_addr;
    w.rkey = wr.wr.atomic.rkey;
    w.compare_add = wr.wr.atomic.compare_add;
    w.swap = wr.wr.atomic.swap;
  }
  if (qp.qpx.qp_base.qp_type == IBV_QPT_UD) {
    const Ah* ah = to_ah(wr.wr.ud.ah);
    w.remote_qpn = wr.wr.ud.remote_qpn;
    // A qkey with the high bit set means "use the QP's own qkey" (IBTA 10.2.5).
    w.remote_qkey = (wr.wr.ud.remote_qkey & 0x80000000u) ? qp.attr.qkey : wr.wr.ud.remote_qkey;
    w.dgid = ah->dgid;
  }
  return w;
}

// Inline data is read at post time: the application may reuse the buffer right away.
void capture_inline(SendWork& w) {
  if (!(w.send_flags & IBV_SEND_INLINE) || !w.inline_data.empty()) return;
  w.inline_data.reserve(payload_length(w));
  for (int i = 0; i < w.num_sge; ++i) {
    const char* p = reinterpret_cast<const char*>(w.sge[i].addr);
    w.inline_data.insert(w.inline_data.end(), p, p + w.sge[i].length);
  }
}

bool valid_opcode(ibv_qp_type type, ibv_wr_opcode op) {
  if (type == IBV_QPT_UD) return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM;
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return true;
    default:
      return false;
  }
}

}  // namespace

int requester_post(Qp& qp, const ibv_send_wr& wr) {
  const uint32_t state = qp.shared->state.load(std::memory_order_acquire);
  if (state == IBV_QPS_RESET || state == IBV_QPS_INIT || state == IBV_QPS_RTR) return EINVAL;
  const ibv_qp_type type = qp.qpx.qp_base.qp_type;
  if (!valid_opcode(type, wr.opcode) || wr.num_sge < 0 ||
      static_cast<uint32_t>(wr.num_sge) > qp.cap.max_send_sge)
    return EINVAL;
  if (type == IBV_QPT_UD && !wr.wr.ud.ah) return EINVAL;
  if (wr.send_flags & IBV_SEND_INLINE) {
    uint64_t n = 0;
    for (int i = 0; i < wr.num_sge; ++i) n += wr.sg_list[i].length;
    if (n > qp.cap.max_inline_data || wr.opcode == IBV_WR_RDMA_READ || is_atomic(wr.opcode))
      return EINVAL;
  }
  if (qp.next_seq - qp.retired_seq.load(std::memory_order_acquire) >= qp.cap.max_send_wr)
    return ENOMEM;

  SendWork w = make_work(qp, wr);
  w.seq = ++qp.next_seq;
  if (state == IBV_QPS_ERR || state == IBV_QPS_SQE) {
    flush_one(qp, w);
    return 0;
  }
  if (qp.blocked.empty() && state == IBV_QPS_RTS && execute(qp, w) == Outcome::kCompleted) return 0;
  capture_inline(w);
  const auto when = w.next_attempt;
  qp.blocked.push_back(std::move(w));
  progress_schedule(&qp, when);
  return 0;
}

std::optional<Clock::time_point> requester_progress(Qp& qp) {
  std::lock_guard lock(qp.sq_mutex);
  while (!qp.blocked.empty()) {
    const uint32_t state = qp.shared->state.load(std::memory_order_acquire);
    if (state == IBV_QPS_ERR || state == IBV_QPS_SQE) {
      for (const SendWork& w : qp.blocked) flush_one(qp, w);
      qp.blocked.clear();
      break;
    }
    if (state != IBV_QPS_RTS) return Clock::now() + std::chrono::milliseconds(1);  // SQD
    SendWork& w = qp.blocked.front();
    if (Clock::now() < w.next_attempt) return w.next_attempt;
    if (execute(qp, w) == Outcome::kBlocked) return w.next_attempt;
    qp.blocked.pop_front();
  }
  return std::nullopt;
}

void requester_flush(Qp& qp) {
  for (const SendWork& w : qp.blocked) flush_one(qp, w);
  qp.blocked.clear();
}

}  // namespace softrdma

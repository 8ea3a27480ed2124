#include "engine/requester.hpp"

#include <cerrno>
#include <cstring>

#include "engine/completion_queue.hpp"
#include "engine/direct_post.hpp"
#include "engine/local_payload.hpp"
#include "engine/memory_windows.hpp"
#include "engine/multicast.hpp"
#include "engine/progress.hpp"
#include "engine/qp_types.hpp"
#include "engine/responder.hpp"
#include "engine/send_completion.hpp"
#include "engine/transmit.hpp"
#include "verbs/device_limits.hpp"

namespace softrdma {
namespace {

using Kind = ResponderReply::Kind;

// RC: the connected QP (resolved once); UD: the QP the address handle names.
bool find_local_peer(Qp& qp, const SendWork& w, TargetQp& scratch, TargetQp*& target) {
  if (qp.qpx.qp_base.qp_type == IBV_QPT_UD) {
    target = &scratch;
    return resolve_local_qp(w.remote_qpn, scratch);
  }
  target = &qp.peer;
  if (qp.peer.slot && qp.peer.current()) return true;
  // The connected QP: the fast path (direct_post) may announce accesses to it from now on.
  if (QpSlot* slot = Registry::instance().qp_slot(qp.attr.dest_qp_num))
    Registry::note_reached_directly(slot->reached_directly,
                                    Registry::instance().reacher_mark(qp.qpx.qp_base.qp_num));
  return resolve_local_qp(qp.attr.dest_qp_num, qp.peer);
}

// `w` as the responder of a QP on this host takes it.
InboundRequest to_inbound(const Qp& qp, const SendWork& w, const iovec* iov, int count,
                          uint64_t length) {
  InboundRequest r;
  r.opcode = w.opcode;
  r.qp_type = qp.qpx.qp_base.qp_type;
  r.src_qpn = qp.qpx.qp_base.qp_num;
  if (r.qp_type == IBV_QPT_UD) {  // only a UD receive shows the GIDs (in its GRH)
    const Gid sgid = qp.ctx->gids.at(qp.attr.ah_attr.grh.sgid_index);
    std::memcpy(r.src_gid, sgid.data(), 16);
    std::memcpy(r.dst_gid, w.dgid.data(), 16);
  }
  r.solicited = w.send_flags & IBV_SEND_SOLICITED;
  r.has_imm = w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  r.imm_data = w.imm_data;
  r.remote_addr = w.remote_addr;
  r.rkey = w.rkey;
  r.compare_add = w.compare_add;
  r.swap = w.swap;
  r.qkey = w.remote_qkey;
  r.xrc_srqn = w.xrc_srqn;
  r.local = iov;
  r.local_count = count;
  r.length = length;
  return r;
}

// A UD send to a multicast group: this registry's members on this host get it from here,
// every other member from the datagram (engine/multicast). Unreliable: done once sent.
Outcome send_multicast(Qp& qp, SendWork& w, const iovec* iov, int count, uint64_t length) {
  const InboundRequest r = to_inbound(qp, w, iov, count, length);
  Registry::instance().for_each_mcast_member(w.dgid.data(), [&](uint32_t qpn, pid_t) {
    TargetQp member;
    if (resolve_local_qp(qpn, member)) respond(member, r);
  });
  multicast_transmit(qp.ctx->gids.at(qp.attr.ah_attr.grh.sgid_index), request_header(qp, w, length),
                     iov, count);
  complete(qp, w, IBV_WC_SUCCESS);
  return Outcome::kCompleted;
}

// Runs the responder for a destination on this host, in this thread.
Outcome execute_here(Qp& qp, SendWork& w, const iovec* iov, int count, uint64_t length) {
  const bool ud = qp.qpx.qp_base.qp_type == IBV_QPT_UD;
  TargetQp scratch;
  TargetQp* target = nullptr;
  ResponderReply reply{Kind::kNoAnswer, IBV_WC_SUCCESS, 0};
  if (find_local_peer(qp, w, scratch, target)) {
    reply = respond(*target, to_inbound(qp, w, iov, count, length));
  } else if (ud) {
    reply = {Kind::kDone, IBV_WC_SUCCESS, 0};  // UD to nowhere is lost, not an error
  }

  // UC has no acknowledgements: whatever became of the message, the requester is done.
  if (qp.qpx.qp_base.qp_type == IBV_QPT_UC) reply = {Kind::kDone, IBV_WC_SUCCESS, 0};
  switch (reply.kind) {
    case Kind::kDone:
      if (reply.status == IBV_WC_SUCCESS)
        complete(qp, w, IBV_WC_SUCCESS);
      else
        fail(qp, w, reply.status);
      return Outcome::kCompleted;
    case Kind::kRnr:
      return rnr_exhausted(qp, w, reply.rnr_timer, Clock::now()) ? Outcome::kCompleted
                                                                 : Outcome::kBlocked;
    case Kind::kNoAnswer:
      return retries_exhausted(qp, w, Clock::now()) ? Outcome::kCompleted : Outcome::kBlocked;
  }
  return Outcome::kCompleted;
}

// A bind or a local invalidation, carried out here once the work before it is done (so
// that it takes effect in posting order).
Outcome execute_local(Qp& qp, SendWork& w) {
  if (!qp.inflight.empty()) {
    w.next_attempt = Clock::now() + std::chrono::microseconds(20);
    return Outcome::kBlocked;
  }
  const uint32_t qpn = qp.qpx.qp_base.qp_num;
  ibv_wc_status status = IBV_WC_SUCCESS;
  if (w.opcode == IBV_WR_BIND_MW)
    status = bind_window(w.bind, qp.pd_id, qpn);
  else if (!invalidate_window(w.rkey, self_process(), qp.pd_id, qpn))
    status = IBV_WC_LOC_QP_OP_ERR;
  if (status == IBV_WC_SUCCESS)
    complete(qp, w, status);
  else
    fail(qp, w, status);
  return Outcome::kCompleted;
}

Outcome execute(Qp& qp, SendWork& w) {
  if (is_local_operation(w.opcode)) return execute_local(qp, w);
  const bool ud = qp.qpx.qp_base.qp_type == IBV_QPT_UD;
  const bool multicast = ud && is_multicast(w.dgid);
  const bool remote = !multicast && destination_is_remote(qp, w);
  // Sent to another host, it may go out again after the application has reused its inline
  // buffer (an RNR, a connection lost): its bytes are kept.
  if (remote) capture_inline(w);
  LocalPayload local;
  if (!gather_local_payload(qp, w, local)) {
    fail(qp, w, IBV_WC_LOC_PROT_ERR);
    return Outcome::kCompleted;
  }
  const uint64_t length = is_atomic(w.opcode) ? sizeof(uint64_t) : payload_length(w);
  if (length > limits::kMaxMsgSize || (ud && length > limits::kMtuBytes) ||
      (is_atomic(w.opcode) && payload_length(w) < sizeof(uint64_t)) ||
      (w.opcode == IBV_WR_ATOMIC_WRITE && length != sizeof(uint64_t))) {
    fail(qp, w, IBV_WC_LOC_LEN_ERR);
    return Outcome::kCompleted;
  }
  if (multicast) return send_multicast(qp, w, local.iov, local.count, length);
  if (remote) return transmit(qp, w, local.iov, local.count, length);
  return execute_here(qp, w, local.iov, local.count, length);
}

SendWork make_work(const Qp& qp, const ibv_send_wr& wr) {
  SendWork w;
  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.send_flags = wr.send_flags;
  w.imm_data = wr.imm_data;
  w.sges = SgeList(wr.sg_list, wr.num_sge);
  if (wr.opcode == IBV_WR_RDMA_WRITE || wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
      wr.opcode == IBV_WR_RDMA_READ || wr.opcode == IBV_WR_ATOMIC_WRITE) {
    w.remote_addr = wr.wr.rdma.remote_addr;
    w.rkey = wr.wr.rdma.rkey;
  } else if (is_atomic(wr.opcode)) {
    w.remote_addr = wr.wr.atomic.remote_addr;
    w.rkey = wr.wr.atomic.rkey;
    w.compare_add = wr.wr.atomic.compare_add;
    w.swap = wr.wr.atomic.swap;
  } else if (wr.opcode == IBV_WR_BIND_MW) {
    const ibv_mw_bind_info& info = wr.bind_mw.bind_info;
    w.bind.window_key = wr.bind_mw.mw->rkey;
    w.bind.new_key = wr.bind_mw.rkey;
    w.bind.region_key = info.mr ? info.mr->lkey : 0;
    w.bind.addr = info.addr;
    w.bind.length = info.length;
    w.bind.access = info.mw_access_flags;
  } else if (wr.opcode == IBV_WR_LOCAL_INV || wr.opcode == IBV_WR_SEND_WITH_INV) {
    w.rkey = wr.invalidate_rkey;
  }
  if (qp.qpx.qp_base.qp_type == IBV_QPT_UD) {
    const Ah* ah = to_ah(wr.wr.ud.ah);
    w.remote_qpn = wr.wr.ud.remote_qpn;
    // A qkey with the high bit set means "use the QP's own qkey" (IBTA 10.2.5).
    w.remote_qkey = (wr.wr.ud.remote_qkey & 0x80000000u) ? qp.attr.qkey : wr.wr.ud.remote_qkey;
    w.dgid = ah->dgid;
  }
  if (qp.qpx.qp_base.qp_type == IBV_QPT_XRC_SEND) w.xrc_srqn = wr.qp_type.xrc.remote_srqn;
  return w;
}

}  // namespace

int requester_check(const Qp& qp, const ibv_send_wr& wr) {
  const uint32_t state = qp.shared->state.load(std::memory_order_acquire);
  if (state == IBV_QPS_RESET || state == IBV_QPS_INIT || state == IBV_QPS_RTR) return EINVAL;
  const ibv_qp_type type = qp.qpx.qp_base.qp_type;
  if (!opcode_allowed(type, wr.opcode) || wr.num_sge < 0 ||
      static_cast<uint32_t>(wr.num_sge) > qp.cap.max_send_sge)
    return EINVAL;
  if (type == IBV_QPT_UD && !wr.wr.ud.ah) return EINVAL;
  if (wr.opcode == IBV_WR_BIND_MW && !wr.bind_mw.mw) return EINVAL;
  if (wr.send_flags & IBV_SEND_INLINE) {
    uint64_t n = 0;
    for (int i = 0; i < wr.num_sge; ++i) n += wr.sg_list[i].length;
    // An atomic write's 8 bytes travel in the work request, whatever the inline limit.
    const bool over_limit = n > qp.cap.max_inline_data && wr.opcode != IBV_WR_ATOMIC_WRITE;
    if (over_limit || wr.opcode == IBV_WR_RDMA_READ || is_atomic(wr.opcode)) return EINVAL;
  }
  return 0;
}

bool requester_has_room(const Qp& qp, size_t count) {
  const uint64_t outstanding = qp.next_seq - qp.retired_seq.load(std::memory_order_acquire);
  return outstanding + count <= qp.cap.max_send_wr;
}

int requester_post(Qp& qp, const ibv_send_wr& wr) {
  if (post_direct(qp, wr)) return 0;
  if (int err = requester_check(qp, wr)) return err;
  if (!requester_has_room(qp, 1)) return ENOMEM;
  const uint32_t state = qp.shared->state.load(std::memory_order_acquire);
  SendWork w = make_work(qp, wr);
  w.seq = ++qp.next_seq;
  if (state == IBV_QPS_ERR || state == IBV_QPS_SQE) {
    // Work posted earlier may still wait for the progress thread to flush it (after a failed
    // answer from another host): flushed first, so completions stay in posting order.
    requester_flush(qp);
    flush_one(qp, w);
    return 0;
  }
  if (qp.blocked.empty() && state == IBV_QPS_RTS) {
    const Outcome o = execute(qp, w);
    if (o != Outcome::kBlocked) return 0;
  }
  capture_inline(w);
  qp.blocked.push_back(std::move(w));
  // The queue moves in order: what is due is its oldest request, not one just queued
  // behind it (due at once, it would wake the helper for nothing).
  progress_schedule(&qp, qp.blocked.front().next_attempt);
  return 0;
}

std::optional<Clock::time_point> requester_progress(Qp& qp) {
  BiasedLock::Guard lock(qp.sq_mutex);
  const auto now = Clock::now();
  std::optional<Clock::time_point> next = expire_inflight(qp, now);
  while (!qp.blocked.empty()) {
    const uint32_t state = qp.shared->state.load(std::memory_order_acquire);
    if (state == IBV_QPS_ERR || state == IBV_QPS_SQE) {
      requester_flush(qp);
      return std::nullopt;
    }
    if (state != IBV_QPS_RTS) return now + std::chrono::milliseconds(1);  // SQD: hold
    SendWork& w = qp.blocked.front();
    if (now < w.next_attempt) return next ? std::min(*next, w.next_attempt) : w.next_attempt;
    const Outcome o = execute(qp, w);
    if (o == Outcome::kBlocked) return next ? std::min(*next, w.next_attempt) : w.next_attempt;
    qp.blocked.pop_front();
    if (!next) next = expire_inflight(qp, now);
  }
  if (qp.shared->state.load() == IBV_QPS_ERR) requester_flush(qp);
  return next;
}

void requester_flush(Qp& qp) {
  for (const SendWork& w : qp.inflight) flush_one(qp, w);
  qp.inflight.clear();
  for (const SendWork& w : qp.blocked) flush_one(qp, w);
  qp.blocked.clear();
}

}  // namespace softrdma

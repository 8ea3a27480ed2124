#include "engine/responder.hpp"

#include <arpa/inet.h>
#include <cstring>

#include "engine/atomic_word.hpp"
#include "engine/completion_queue.hpp"
#include "engine/memory_access.hpp"
#include "engine/memory_windows.hpp"
#include "engine/qp_types.hpp"
#include "engine/recv_queue.hpp"

namespace softrdma {
namespace {

using Kind = ResponderReply::Kind;

ResponderReply done(ibv_wc_status s) {
  return {Kind::kDone, s, 0};
}
ResponderReply no_answer() {
  return {Kind::kNoAnswer, IBV_WC_SUCCESS, 0};
}

bool ipv4_mapped(const uint8_t gid[16]) {
  return gid[10] == 0xff && gid[11] == 0xff && std::memcmp(gid, "\0\0\0\0\0\0\0\0\0\0", 10) == 0;
}

// A RoCE v2 device reports in a UD receive's `sl` the network header type of the packet
// (the kernel's rdma_network_type), which consumers such as UCX read.
constexpr uint8_t kNetworkIpv4 = 2;
constexpr uint8_t kNetworkIpv6 = 3;

// The 40 bytes at the head of every UD receive buffer: for RoCE v2 over IPv4, 20 unused
// bytes then the IPv4 header; for IPv6 GIDs, an IPv6 header carrying the GIDs.
void build_grh(const InboundRequest& r, uint8_t grh[40]) {
  std::memset(grh, 0, 40);
  if (ipv4_mapped(r.src_gid)) {
    uint8_t* ip = grh + 20;
    ip[0] = 0x45;
    const uint16_t total = htons(static_cast<uint16_t>(20 + 8 + 12 + r.length + 4));
    std::memcpy(ip + 2, &total, 2);
    ip[8] = 64;  // TTL
    ip[9] = 17;  // UDP
    std::memcpy(ip + 12, r.src_gid + 12, 4);
    std::memcpy(ip + 16, r.dst_gid + 12, 4);
  } else {
    grh[0] = 0x60;
    const uint16_t payload = htons(static_cast<uint16_t>(r.length + 8 + 12 + 4));
    std::memcpy(grh + 4, &payload, 2);
    grh[6] = 17;
    grh[7] = 64;
    std::memcpy(grh + 8, r.src_gid, 16);
    std::memcpy(grh + 24, r.dst_gid, 16);
  }
}

// Where a request to QP `t` lands: the receive queue, completion queue, protection domain
// and memory of `t` itself, or for an XRC target those of the XRC SRQ the request names.
using Landing = TargetQp;

void push_recv_completion(const Landing& m, const CqEntry& e, bool solicited) {
  cq_push(*m.arena, m.arena->at<CqShared>(m.qp->recv_cq_offset), e, solicited);
}

// What an unreliable QP (UC, UD) does with a message it cannot take: drops it, silently.
ResponderReply dropped() {
  return done(IBV_WC_SUCCESS);
}

// Fails the responder QP after a responder-side error, as a NIC does; an unreliable QP (UC,
// UD) drops the message instead and stays as it is.
ResponderReply responder_error(TargetQp& t, ibv_wc_status requester_status, int event) {
  if (!is_reliable(static_cast<ibv_qp_type>(t.qp->qp_type))) return dropped();
  qp_enter_error(*t.arena, t.qp, event);
  return done(requester_status);
}

ResponderReply check_remote_access(TargetQp& t, const Landing& m, const InboundRequest& r,
                                   uint32_t access, PinnedRanges& pinned) {
  if (!(t.qp->access_flags.load(std::memory_order_relaxed) & access) ||
      !pinned.add(r.rkey, r.remote_addr, r.length, m.owner(), m.qp->pd_id, access, t.qpn))
    return responder_error(t, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR);
  return done(IBV_WC_SUCCESS);
}

// SEND, SEND_WITH_IMM and WRITE_WITH_IMM take the oldest posted receive.
ResponderReply deliver_to_receive(TargetQp& t, const Landing& m, const InboundRequest& r) {
  const bool ud = r.qp_type == IBV_QPT_UD;
  const bool reliable = is_reliable(r.qp_type);
  const bool write_imm = r.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  auto* rq = m.arena->at<RecvQueueShared>(m.qp->recv_queue_offset);
  PinnedRanges remote;
  if (write_imm && r.length) {
    ResponderReply a = check_remote_access(t, m, r, IBV_ACCESS_REMOTE_WRITE, remote);
    if (a.status != IBV_WC_SUCCESS) return a;
  }

  uint64_t wr_id;
  PinnedRanges dest;
  bool dest_ok;
  {
    SharedBiasedLock::Guard guard(rq->lock);
    RecvWqe* w = recv_queue_front(rq);
    if (!w) {
      if (!reliable) return dropped();  // nobody is ready to receive it
      return {Kind::kRnr, IBV_WC_SUCCESS, t.qp->min_rnr_timer};
    }
    wr_id = w->wr_id;
    dest_ok = write_imm || pin_sge_list(dest, w->sge(), static_cast<int>(w->num_sge), m.owner(),
                                        rq->pd_id, IBV_ACCESS_LOCAL_WRITE);
    recv_queue_pop(rq);
    if (rq->is_srq) srq_limit_check(*m.arena, rq);
  }

  CqEntry e{};
  e.wr_id = wr_id;
  e.qp_num = t.qpn;
  e.src_qp = r.src_qpn;
  if (!dest_ok) {
    e.status = IBV_WC_LOC_PROT_ERR;
    push_recv_completion(m, e, true);
    if (!reliable) return dropped();
    return responder_error(t, IBV_WC_REM_OP_ERR, IBV_EVENT_QP_FATAL);
  }
  const uint64_t grh_bytes = ud ? 40 : 0;
  if (!write_imm && dest.total() < r.length + grh_bytes) {
    e.status = IBV_WC_LOC_LEN_ERR;
    push_recv_completion(m, e, true);
    if (!reliable) return dropped();
    return responder_error(t, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_FATAL);
  }

  int err = 0;
  if (write_imm) {
    if (r.length) err = copy_into(remote, m.owner(), r.local, r.local_count, r.tail);
  } else {
    iovec src[kMaxSge + 1];
    uint8_t grh[40];
    int n = 0;
    if (ud) {
      build_grh(r, grh);
      src[n++] = iovec{grh, sizeof grh};
    }
    for (int i = 0; i < r.local_count && n <= kMaxSge; ++i) src[n++] = r.local[i];
    err = copy_into(dest, m.owner(), src, n, r.tail);
  }
  if (err == ESRCH) return no_answer();  // the target process is gone
  if (err) {
    e.status = IBV_WC_LOC_PROT_ERR;
    push_recv_completion(m, e, true);
    return responder_error(t, IBV_WC_REM_OP_ERR, IBV_EVENT_QP_FATAL);
  }
  if (r.opcode == IBV_WR_SEND_WITH_INV) {
    // The window the sender names must be a type 2 one bound through this QP.
    if (!invalidate_window(r.rkey, m.owner(), m.qp->pd_id, t.qpn)) {
      e.status = IBV_WC_LOC_QP_OP_ERR;
      push_recv_completion(m, e, true);
      return responder_error(t, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
    }
    e.imm_data = r.rkey;  // ibv_wc's invalidated_rkey shares imm_data's place
    e.wc_flags |= IBV_WC_WITH_INV;
  }
  e.status = IBV_WC_SUCCESS;
  e.opcode = write_imm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
  e.byte_len = static_cast<uint32_t>(r.length + grh_bytes);
  if (r.has_imm) {
    e.imm_data = r.imm_data;
    e.wc_flags |= IBV_WC_WITH_IMM;
  }
  if (ud) {
    e.wc_flags |= IBV_WC_GRH;
    e.sl = ipv4_mapped(r.src_gid) ? kNetworkIpv4 : kNetworkIpv6;
  }
  push_recv_completion(m, e, r.solicited);
  return done(IBV_WC_SUCCESS);
}

ResponderReply rdma_write(TargetQp& t, const Landing& m, const InboundRequest& r) {
  if (r.length == 0) return done(IBV_WC_SUCCESS);  // zero-length: no key is checked
  PinnedRanges remote;
  ResponderReply a = check_remote_access(t, m, r, IBV_ACCESS_REMOTE_WRITE, remote);
  if (a.status != IBV_WC_SUCCESS) return a;
  int err = copy_into(remote, m.owner(), r.local, r.local_count, r.tail);
  if (err == ESRCH) return no_answer();
  return err ? responder_error(t, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR)
             : done(IBV_WC_SUCCESS);
}

ResponderReply rdma_read(TargetQp& t, const Landing& m, const InboundRequest& r) {
  if (r.length == 0) return done(IBV_WC_SUCCESS);
  PinnedRanges remote;
  ResponderReply a = check_remote_access(t, m, r, IBV_ACCESS_REMOTE_READ, remote);
  if (a.status != IBV_WC_SUCCESS) return a;
  int err = copy_out_of(remote, m.owner(), r.local, r.local_count);
  if (err == ESRCH) return no_answer();
  return err ? responder_error(t, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR)
             : done(IBV_WC_SUCCESS);
}

// An atomic's 8-byte target: aligned, and inside a region with `access`.
ResponderReply check_atomic_target(TargetQp& t, const Landing& m, const InboundRequest& r,
                                   uint32_t access, PinnedRanges& remote) {
  if (r.length != sizeof(uint64_t) || r.remote_addr % sizeof(uint64_t))
    return responder_error(t, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
  return check_remote_access(t, m, r, access, remote);
}

// A word not updated lock-free: every atomic on this host to it goes through this lock.
ProcessLock& word_lock(const Landing& m, const PinnedRanges& remote) {
  return Registry::instance().atomic_lock(m.owner().pid,
                                          reinterpret_cast<uint64_t>(remote.iov()[0].iov_base));
}

bool lock_free(const PinnedRanges& remote) {
  return remote.all_mapped() &&
         updated_lock_free(remote.mapped()[0].iov_base, remote.on_shared_pages());
}

ResponderReply atomic(TargetQp& t, const Landing& m, const InboundRequest& r) {
  PinnedRanges remote;
  ResponderReply a = check_atomic_target(t, m, r, IBV_ACCESS_REMOTE_ATOMIC, remote);
  if (a.status != IBV_WC_SUCCESS) return a;
  uint64_t original = 0;
  int err = 0;
  if (lock_free(remote)) {
    original = cpu_atomic(r.opcode, remote.mapped()[0].iov_base, r.compare_add, r.swap);
  } else {
    ProcessLockGuard guard(word_lock(m, remote));
    iovec mine{&original, sizeof original};
    err = copy_out_of(remote, m.owner(), &mine, 1);
    uint64_t updated = atomic_result(r.opcode, original, r.compare_add, r.swap);
    iovec next{&updated, sizeof updated};
    if (!err && updated != original) err = copy_into(remote, m.owner(), &next, 1);
  }
  if (err == ESRCH) return no_answer();
  if (err) return responder_error(t, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR);
  // The original value goes back into the requester's buffer.
  iovec result{&original, sizeof original};
  copy_to_process(self_process(), &result, 1, r.local, r.local_count);
  return done(IBV_WC_SUCCESS);
}

// ATOMIC WRITE: the 8 bytes land as one store, ordered with the host's other atomics.
ResponderReply atomic_write(TargetQp& t, const Landing& m, const InboundRequest& r) {
  PinnedRanges remote;
  ResponderReply a = check_atomic_target(t, m, r, IBV_ACCESS_REMOTE_WRITE, remote);
  if (a.status != IBV_WC_SUCCESS) return a;
  int err = 0;
  if (lock_free(remote)) {
    uint64_t value = 0;
    iovec into{&value, sizeof value};
    copy_to_process(self_process(), r.local, r.local_count, &into, 1);
    std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(remote.mapped()[0].iov_base)).store(value);
  } else {
    ProcessLockGuard guard(word_lock(m, remote));
    err = copy_into(remote, m.owner(), r.local, r.local_count);
  }
  if (err == ESRCH) return no_answer();
  return err ? responder_error(t, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR)
             : done(IBV_WC_SUCCESS);
}

// Carries out a request that QP `t` accepted (state, peer and opcode checked).
ResponderReply execute(TargetQp& t, const Landing& m, const InboundRequest& r) {
  switch (r.opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return deliver_to_receive(t, m, r);
    case IBV_WR_RDMA_WRITE:
      return rdma_write(t, m, r);
    case IBV_WR_RDMA_READ:
      return rdma_read(t, m, r);
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return atomic(t, m, r);
    case IBV_WR_ATOMIC_WRITE:
      return atomic_write(t, m, r);
    default:
      return responder_error(t, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
  }
}

// An XRC target QP has no queues and no protection domain of its own: the request goes into
// the XRC SRQ it names, which must be of the target's XRC domain (else the request is
// invalid, as an XRC domain violation is on a NIC), and uses that SRQ's PD and CQ.
ResponderReply execute_through_srq(TargetQp& t, const InboundRequest& r) {
  TargetQp srq;
  if (!resolve_local_qp(r.xrc_srqn, srq) || srq.qp->qp_type != kXrcSrqEntry ||
      srq.qp->xrcd_id != t.qp->xrcd_id)
    return responder_error(t, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
  TargetHold hold(srq);
  if (!hold.ok() || !srq.arena->owner_alive())
    return responder_error(t, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
  return execute(t, srq, r);
}

}  // namespace

bool accepts_requests(uint32_t state) {
  return state == IBV_QPS_RTR || state == IBV_QPS_RTS || state == IBV_QPS_SQD ||
         state == IBV_QPS_SQE;
}

bool TargetQp::current() const {
  return slot_word::is_live(slot->state) &&
         slot->generation.load(std::memory_order_acquire) == generation;
}

bool resolve_local_qp(uint32_t qpn, TargetQp& out) {
  QpSlot* slot = Registry::instance().qp_slot(qpn);
  if (!slot || !slot_word::is_live(slot->state)) return false;
  if (slot->netns != self_netns()) return false;  // another "host" sharing this machine
  const ProcessId owner{slot->pid, slot->start_time};
  auto arena = map_peer_arena(owner, slot->arena_fd);
  if (!arena) return false;
  out.arena = std::move(arena);
  out.slot = slot;
  out.generation = slot->generation.load(std::memory_order_acquire);
  out.qpn = qpn;
  out.qp = out.arena->at<QpShared>(slot->qp_offset);
  return out.current() && out.qp->qpn == qpn;
}

ResponderReply respond(TargetQp& t, const InboundRequest& r) {
  TargetHold hold(t);
  // A dead process answers nothing, whatever of its memory is still mapped here. An
  // unreliable message to it is lost at once: the sender never waits on it.
  const ResponderReply lost = is_reliable(r.qp_type) ? no_answer() : dropped();
  if (!hold.ok() || !t.arena->owner_alive()) return lost;
  QpShared* qp = t.qp;
  if (qp->qp_type != static_cast<uint32_t>(responder_type(r.qp_type))) return lost;
  if (!accepts_requests(qp->state.load(std::memory_order_acquire))) return lost;
  if (r.qp_type == IBV_QPT_UD) {
    if (r.qkey != qp->qkey) return dropped();
    return deliver_to_receive(t, t, r);
  }
  if (qp->dest_qpn != r.src_qpn) return lost;  // not the connected peer
  if (r.from && r.qp_type == IBV_QPT_UC && !admit_unreliable_connected(*qp, r)) return lost;
  if (!opcode_allowed(r.qp_type, r.opcode))
    return responder_error(t, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
  if (qp->qp_type == IBV_QPT_XRC_RECV) return execute_through_srq(t, r);
  return execute(t, t, r);
}

void flush_receive_queue(PeerArena& owner, QpShared* qp) {
  // An SRQ outlives its QPs: nothing of it is flushed. XRC_SEND QPs have no receive queue.
  if (qp->uses_srq || !qp->recv_queue_offset) return;
  auto* rq = owner.at<RecvQueueShared>(qp->recv_queue_offset);
  auto* cq = owner.at<CqShared>(qp->recv_cq_offset);
  SharedBiasedLock::Guard guard(rq->lock);
  for (RecvWqe* w; (w = recv_queue_front(rq)); recv_queue_pop(rq)) {
    CqEntry e{};
    e.wr_id = w->wr_id;
    e.status = IBV_WC_WR_FLUSH_ERR;
    e.qp_num = qp->qpn;
    cq_push(owner, cq, e, true);
  }
}

bool qp_mark_error(QpShared* qp) {
  return qp->state.exchange(IBV_QPS_ERR, std::memory_order_acq_rel) != IBV_QPS_ERR;
}

void qp_enter_error(PeerArena& owner, QpShared* qp, int event) {
  if (qp_mark_error(qp)) qp_finish_error(owner, qp, event);
}

void qp_finish_error(PeerArena& owner, QpShared* qp, int event) {
  flush_receive_queue(owner, qp);
  if (event)
    async_push(owner, qp->context_offset, static_cast<ibv_event_type>(event), qp->owner_handle);
  if (qp->uses_srq)
    async_push(owner, qp->context_offset, IBV_EVENT_QP_LAST_WQE_REACHED, qp->owner_handle);
}

}  // namespace softrdma

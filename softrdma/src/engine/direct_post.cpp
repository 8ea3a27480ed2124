#include "engine/direct_post.hpp"

#include <cstring>

#include "common/asymmetric_fence.hpp"
#include "engine/atomic_word.hpp"
#include "engine/completion_queue.hpp"
#include "engine/ordered_copy.hpp"
#include "engine/recv_queue.hpp"
#include "engine/region_cache.hpp"
#include "engine/requester.hpp"
#include "engine/responder.hpp"
#include "engine/send_completion.hpp"
#include "verbs/device_limits.hpp"

namespace softrdma {
namespace {

// Flags the fast path honours as the general path does: fences and solicitation change
// nothing for a request carried out at once, inline bytes are read here and now.
constexpr unsigned kDirectFlags =
    IBV_SEND_SIGNALED | IBV_SEND_FENCE | IBV_SEND_SOLICITED | IBV_SEND_INLINE;

struct Remote {
  uint64_t addr;
  uint32_t rkey;
  uint32_t access;  // the right the target must grant
};

bool remote_of(const ibv_send_wr& wr, Remote& out) {
  switch (wr.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      out = {wr.wr.rdma.remote_addr, wr.wr.rdma.rkey, IBV_ACCESS_REMOTE_WRITE};
      return true;
    case IBV_WR_RDMA_READ:
      out = {wr.wr.rdma.remote_addr, wr.wr.rdma.rkey, IBV_ACCESS_REMOTE_READ};
      return true;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      out = {wr.wr.atomic.remote_addr, wr.wr.atomic.rkey, IBV_ACCESS_REMOTE_ATOMIC};
      return true;
    default:
      return false;
  }
}

bool is_send(ibv_wr_opcode op) {
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM;
}
bool is_write(ibv_wr_opcode op) {
  return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

// The request's shape is one the fast path carries out.
bool common_shape(const Qp& qp, const ibv_send_wr& wr) {
  if (wr.num_sge != 1 || qp.cap.max_send_sge < 1 || (wr.send_flags & ~kDirectFlags)) return false;
  const uint32_t length = wr.sg_list[0].length;
  if (is_atomic(wr.opcode))
    return length == sizeof(uint64_t) && wr.wr.atomic.remote_addr % sizeof(uint64_t) == 0 &&
           !(wr.send_flags & IBV_SEND_INLINE);
  if (length > limits::kMaxMsgSize || (length == 0 && !is_send(wr.opcode))) return false;
  const bool may_be_inline = is_write(wr.opcode) || is_send(wr.opcode);
  return !(wr.send_flags & IBV_SEND_INLINE) || (may_be_inline && length <= qp.cap.max_inline_data);
}

// The local buffer of the single SGE, checked against this QP's PD; null if not allowed.
char* local_buffer(Qp& qp, const ibv_send_wr& wr) {
  const ibv_sge& sge = wr.sg_list[0];
  if (wr.send_flags & IBV_SEND_INLINE) return reinterpret_cast<char*>(sge.addr);
  const bool reads_it = is_write(wr.opcode) || is_send(wr.opcode);
  const uint32_t need = reads_it ? 0 : IBV_ACCESS_LOCAL_WRITE;
  return qp.local_keys.reach(sge.lkey, sge.addr, sge.length, need, qp.pd_id);
}

// Says what the access about to be checked relies on; the checks' loads come after it.
// The retiring side fences heavily (Registry::wait_for_direct_accessors).
[[gnu::always_inline]] inline void announce(Qp& qp, uint64_t word) {
  store_then_fence(qp.direct_access->word, word);
}

// The connected peer takes requests: alive, RC, receiving and connected back to us.
bool peer_takes(const Qp& qp, const TargetQp& t) {
  const QpShared* p = t.qp;
  return t.current() && t.arena->owner_alive() && p->qp_type == IBV_QPT_RC &&
         accepts_requests(p->state.load(std::memory_order_acquire)) &&
         p->dest_qpn == qp.qpx.qp_base.qp_num;
}

bool peer_grants(const TargetQp& t, uint32_t access) {
  return t.qp->access_flags.load(std::memory_order_relaxed) & access;
}

// Takes the peer's oldest posted receive (from its own queue or its SRQ), if that is the
// common case: the queue's PD is the peer's, and for a SEND (`scatter_into`, where its
// `length` bytes land) one SGE holds the message. Anything else (no receive posted, a
// receive too small or not allowed) takes nothing from the queue and is left to the general
// path, which reports it as it always has.
bool take_receive(Qp& qp, TargetQp& t, uint64_t& wr_id, RegionCache::Reach* scatter_into = nullptr,
                  uint32_t length = 0) {
  QpShared* p = t.qp;
  auto* rq = t.arena->at<RecvQueueShared>(p->recv_queue_offset);
  if (rq->pd_id != p->pd_id) return false;  // an SRQ of another PD: keys checked elsewhere
  SharedBiasedLock::Guard guard(rq->lock);
  RecvWqe* w = recv_queue_front(rq);
  if (!w) return false;
  if (scatter_into) {
    if (w->num_sge > 1) return false;
    if (length) {
      const ibv_sge& sge = w->sge()[0];
      if (w->num_sge == 0 || sge.length < length) return false;
      announce(qp, DirectAccess::of(t.qpn, sge.lkey));
      if (!qp.region_cache.reach(t, sge.lkey, sge.addr, length, IBV_ACCESS_LOCAL_WRITE,
                                 *scatter_into))
        return false;
    }
  }
  wr_id = w->wr_id;
  recv_queue_pop(rq);
  if (rq->is_srq) srq_limit_check(*t.arena, rq);
  return true;
}

// The receive completion of a SEND or a WRITE_WITH_IMM that took receive `wr_id`.
void complete_receive(const Qp& qp, const TargetQp& t, const ibv_send_wr& wr, uint64_t wr_id) {
  CqEntry e{};
  e.wr_id = wr_id;
  e.status = IBV_WC_SUCCESS;
  e.opcode = is_send(wr.opcode) ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM;
  e.byte_len = wr.sg_list[0].length;
  e.qp_num = t.qpn;
  e.src_qp = qp.qpx.qp_base.qp_num;
  if (wr.opcode != IBV_WR_SEND) {
    e.imm_data = wr.imm_data;
    e.wc_flags = IBV_WC_WITH_IMM;
  }
  cq_push(*t.arena, t.arena->at<CqShared>(t.qp->recv_cq_offset), e,
          wr.send_flags & IBV_SEND_SOLICITED);
}

[[gnu::noinline]] bool deliver_send(Qp& qp, TargetQp& t, const ibv_send_wr& wr, const char* local) {
  const uint32_t length = wr.sg_list[0].length;
  uint64_t wr_id;
  RegionCache::Reach dest;
  if (!take_receive(qp, t, wr_id, &dest, length)) return false;
  // As a WRITE lands (engine/ordered_copy.hpp): the last word stored once, after the rest,
  // and a short message copied without a call. An empty SEND reaches no region: `dest` is
  // set only for a message with bytes.
  if (length) move_tail_last(dest.here, local, length);
  complete_receive(qp, t, wr, wr_id);
  return true;
}

// A WRITE_WITH_IMM lands only with a receive to complete, as on the general path.
[[gnu::noinline]] bool write_with_imm(Qp& qp, TargetQp& t, const ibv_send_wr& wr, const char* local,
                                      const RegionCache::Reach& target) {
  uint64_t wr_id;
  if (!take_receive(qp, t, wr_id)) return false;
  move_tail_last(target.here, local, wr.sg_list[0].length);
  complete_receive(qp, t, wr, wr_id);
  return true;
}

// The atomic on the target word (engine/atomic_word.hpp); returns the original value.
uint64_t atomic_on(const ibv_send_wr& wr, const TargetQp& t, const RegionCache::Reach& word) {
  const uint64_t compare_add = wr.wr.atomic.compare_add;
  const uint64_t swap = wr.wr.atomic.swap;
  if (updated_lock_free(word.here, word.on_shared_pages))
    return cpu_atomic(wr.opcode, word.here, compare_add, swap);
  ProcessLockGuard guard(Registry::instance().atomic_lock(t.owner().pid, word.host_addr));
  uint64_t original;
  std::memcpy(&original, word.here, sizeof original);
  const uint64_t updated = atomic_result(wr.opcode, original, compare_add, swap);
  if (updated != original) std::memcpy(word.here, &updated, sizeof updated);
  return original;
}

}  // namespace

bool post_direct(Qp& qp, const ibv_send_wr& wr) {
  Remote remote{};
  const bool send = is_send(wr.opcode);
  if ((!send && !remote_of(wr, remote)) || qp.qpx.qp_base.qp_type != IBV_QPT_RC ||
      !qp.peer_on_this_host || !qp.blocked.empty() || !qp.peer.slot || !common_shape(qp, wr) ||
      qp.shared->state.load(std::memory_order_acquire) != IBV_QPS_RTS || !requester_has_room(qp, 1))
    return false;
  char* local = local_buffer(qp, wr);
  if (!local) return false;

  TargetQp& t = qp.peer;
  const uint32_t length = wr.sg_list[0].length;
  // Announced before anything of the peer is checked: its QP and the region stay while the
  // word names them (see DirectAccess).
  announce(qp, DirectAccess::of(t.qpn, remote.rkey));
  bool taken = peer_takes(qp, t);
  if (taken && send) {
    taken = deliver_send(qp, t, wr, local);
  } else if (taken) {
    RegionCache::Reach target;
    taken = peer_grants(t, remote.access) &&
            qp.region_cache.reach(t, remote.rkey, remote.addr, length, remote.access, target);
    if (taken) {
      if (wr.opcode == IBV_WR_RDMA_WRITE) {
        move_tail_last(target.here, local, length);
      } else if (wr.opcode == IBV_WR_RDMA_READ) {
        move_tail_last(local, target.here, length);
      } else if (wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        taken = write_with_imm(qp, t, wr, local, target);
      } else {
        const uint64_t original = atomic_on(wr, t, target);
        std::memcpy(local, &original, sizeof original);
      }
    }
  }
  qp.direct_access->word.store(0, std::memory_order_release);
  if (!taken) return false;

  const uint64_t seq = ++qp.next_seq;
  if (qp.sq_sig_all || (wr.send_flags & IBV_SEND_SIGNALED)) {
    const uint32_t byte_len = is_write(wr.opcode) || send ? 0 : length;
    push_send_completion(qp, wr.wr_id, wr.opcode, IBV_WC_SUCCESS, byte_len, seq);
  }
  return true;
}

}  // namespace softrdma

// ibv_modify_qp: the QP state machine and the attribute masks each transition requires
// and allows (IBTA 11.2.5, as the kernel's ib_modify_qp_is_ok checks them).
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/export.hpp"
#include "engine/completion_queue.hpp"
#include "engine/psn.hpp"
#include "engine/qp_types.hpp"
#include "engine/recv_queue.hpp"
#include "engine/requester.hpp"
#include "engine/responder.hpp"
#include "engine/transmit.hpp"
#include "verbs/device_limits.hpp"
#include "verbs/objects.hpp"
#include "wire/listener.hpp"

using namespace softrdma;

namespace {

struct Rule {
  bool allowed = false;
  int rc_required = 0, rc_optional = 0, ud_required = 0, ud_optional = 0;
};

constexpr int kStates = IBV_QPS_ERR + 1;

constexpr Rule rule(ibv_qp_state from, ibv_qp_state to) {
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return {true};
  switch (from) {
    case IBV_QPS_RESET:
      if (to == IBV_QPS_INIT)
        return {true, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0,
                IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0};
      break;
    case IBV_QPS_INIT:
      if (to == IBV_QPS_INIT)
        return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0,
                IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY};
      if (to == IBV_QPS_RTR)
        return {true,
                IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX, 0,
                IBV_QP_PKEY_INDEX | IBV_QP_QKEY};
      break;
    case IBV_QPS_RTR:
      if (to == IBV_QPS_RTS)
        return {true,
                IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                    IBV_QP_MAX_QP_RD_ATOMIC,
                IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                    IBV_QP_PATH_MIG_STATE,
                IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      break;
    case IBV_QPS_RTS:
      if (to == IBV_QPS_RTS)
        return {true, 0,
                IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
                    IBV_QP_MIN_RNR_TIMER,
                0, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      if (to == IBV_QPS_SQD)
        return {true, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
      break;
    case IBV_QPS_SQD:
      if (to == IBV_QPS_RTS)
        return {true, 0,
                IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                    IBV_QP_PATH_MIG_STATE,
                0, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      if (to == IBV_QPS_SQD)
        return {true, 0,
                IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                    IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE | IBV_QP_TIMEOUT |
                    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
                    IBV_QP_MAX_DEST_RD_ATOMIC,
                0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY};
      break;
    case IBV_QPS_SQE:
      // Only unreliable QPs enter SQE; RC errors go straight to ERROR.
      if (to == IBV_QPS_RTS) return {true, -1, 0, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      break;
    default:
      break;
  }
  return {};
}

// Attributes of the reliable service only (acknowledgements, retries, RDMA READ and atomic
// depths): UC takes RC's masks without them, and refuses them as the kernel does.
constexpr int kResponderOnly = IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRequesterOnly = IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
constexpr int kReliableOnly = kResponderOnly | kRequesterOnly | IBV_QP_TIMEOUT;

// The attributes a transition of a QP of `type` requires and allows; required < 0: the
// transition is not allowed for that type.
std::pair<int, int> masks_for(ibv_qp_type type, const Rule& r, ibv_qp_state from) {
  if (type == IBV_QPT_UD) return {r.ud_required, r.ud_optional};
  if (type == IBV_QPT_RC) return {r.rc_required, r.rc_optional};
  // Each half of XRC needs RC's attributes of its own side only; the other side's are
  // accepted and have no effect.
  if (type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV) {
    const int other_side = type == IBV_QPT_XRC_SEND ? kResponderOnly : kRequesterOnly;
    return {r.rc_required & ~other_side, r.rc_optional | (r.rc_required & other_side)};
  }
  // UC, like UD, may leave SQE for RTS (a send error does not fail the whole QP).
  if (from == IBV_QPS_SQE && r.rc_required < 0) return {0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS};
  return {r.rc_required & ~kReliableOnly, r.rc_optional & ~kReliableOnly};
}

// ON_DEMAND is taken as ODP-capable devices take it (rdma-core's ODP tests pass their
// regions' flags): every QP here may use on-demand regions anyway.
constexpr int kKnownAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                             IBV_ACCESS_MW_BIND | IBV_ACCESS_ON_DEMAND;

int check_values(const Qp& q, const ibv_qp_attr& a, int mask) {
  if ((mask & IBV_QP_PORT) && a.port_num != limits::kPortNum) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && a.pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_ACCESS_FLAGS) && (a.qp_access_flags & ~kKnownAccess)) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (a.path_mtu < IBV_MTU_256 || a.path_mtu > limits::kMtu))
    return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a.max_rd_atomic > limits::kMaxQpRdAtom) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > limits::kMaxQpRdAtom)
    return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && a.timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && a.retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && a.rnr_retry > 7) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a.min_rnr_timer > 31) return EINVAL;
  if ((mask & IBV_QP_DEST_QPN) && a.dest_qp_num >= (1u << 24)) return EINVAL;
  if (mask & IBV_QP_AV) {
    if (a.ah_attr.port_num != limits::kPortNum) return EINVAL;
    // The port is Ethernet (RoCE): a path without a GRH has no address, and a RoCE NIC
    // refuses it here rather than letting the program fail later across hosts.
    if (!a.ah_attr.is_global) return EINVAL;
    if (a.ah_attr.is_global && a.ah_attr.grh.sgid_index >= q.ctx->gids.populated()) return EINVAL;
  }
  return 0;
}

// Copies the attributes selected by `mask` into the QP.
void apply(Qp& q, const ibv_qp_attr& a, int mask) {
  ibv_qp_attr& m = q.attr;
  QpShared& s = *q.shared;
  if (mask & IBV_QP_PKEY_INDEX) m.pkey_index = a.pkey_index;
  if (mask & IBV_QP_PORT) m.port_num = a.port_num;
  if (mask & IBV_QP_QKEY) s.qkey = m.qkey = a.qkey;
  if (mask & IBV_QP_ACCESS_FLAGS) s.access_flags.store(m.qp_access_flags = a.qp_access_flags);
  if (mask & IBV_QP_PATH_MTU) m.path_mtu = a.path_mtu;
  if (mask & IBV_QP_DEST_QPN) s.dest_qpn = m.dest_qp_num = a.dest_qp_num;
  // PSNs are where verbs says they start: the peer's requests are expected from rq_psn, ours
  // numbered from sq_psn (perftest and RDMA CM choose them at random).
  if (mask & IBV_QP_RQ_PSN) {
    m.rq_psn = a.rq_psn & psn::kMask;
    start_sequence(&s, m.rq_psn);
  }
  if (mask & IBV_QP_SQ_PSN) {
    m.sq_psn = a.sq_psn & psn::kMask;
    BiasedLock::Guard sq(q.sq_mutex);
    q.next_psn = m.sq_psn;
  }
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) m.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) m.max_rd_atomic = a.max_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) s.min_rnr_timer = m.min_rnr_timer = a.min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) m.timeout = a.timeout;
  if (mask & IBV_QP_RETRY_CNT) m.retry_cnt = a.retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) m.rnr_retry = a.rnr_retry;
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) m.en_sqd_async_notify = a.en_sqd_async_notify;
  if (mask & IBV_QP_AV) {
    m.ah_attr = a.ah_attr;
    std::memcpy(s.dest_gid, a.ah_attr.grh.dgid.raw, 16);
    q.peer = TargetQp{};
  }
  if (mask & (IBV_QP_AV | IBV_QP_DEST_QPN)) {
    BiasedLock::Guard sq(q.sq_mutex);
    q.responder_identity.reset();  // connected anew: the peer's listener is pinned again
  }
  if (mask & (IBV_QP_AV | IBV_QP_DEST_QPN)) {
    // Reached through shared memory when the GID is this host's and the QP number one of
    // this user's registry; another user's QP on this host is reached through its listener.
    Gid dgid;
    std::memcpy(dgid.data(), m.ah_attr.grh.dgid.raw, 16);
    q.peer_on_this_host =
        q.ctx->gids.contains(dgid) && Registry::instance().owns_qpn(m.dest_qp_num);
  }
}

void reset(Qp& q) {
  BiasedLock::Guard lock(q.sq_mutex);
  q.blocked.clear();
  for (const SendWork& w : q.inflight) release_payload(w);
  q.inflight.clear();  // answers still on their way are dropped as stale
  q.retired_seq.store(q.next_seq);
  q.peer = TargetQp{};
  q.implied_acks_known = false;
  q.took_carried_ack = false;
  q.responder_identity.reset();
  q.shared->peer_psn_end.store(0);
  q.shared->acked_psn_sent.store(0);
  restart_sequence(q.shared);
  if (q.rq) {
    SharedBiasedLock::Guard guard(q.rq->lock);
    recv_queue_discard(q.rq);
  }
  const uint32_t qpn = q.qpx.qp_base.qp_num;
  if (q.send_cq) cq_purge_qp(q.send_cq->shared, qpn);
  if (q.recv_cq && q.recv_cq != q.send_cq) cq_purge_qp(q.recv_cq->shared, qpn);
}

}  // namespace

SOFTRDMA_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  Qp& q = *to_qp(qp);
  std::lock_guard lock(q.attr_mutex);
  const auto cur = static_cast<ibv_qp_state>(q.shared->state.load());
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) return EINVAL;
  const auto next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
  if (next < 0 || next >= kStates) return EINVAL;
  const Rule r = rule(cur, next);
  const auto [required, optional] = masks_for(qp->qp_type, r, cur);
  if (!r.allowed || required < 0) return EINVAL;
  const int given = mask & ~IBV_QP_STATE;
  if ((given & required) != required || (given & ~(required | optional))) return EINVAL;
  if (int err = check_values(q, *attr, mask)) return err;

  apply(q, *attr, mask);
  if (next == IBV_QPS_RESET) {
    reset(q);
    q.shared->state.store(IBV_QPS_RESET);
  } else if (next == IBV_QPS_ERR) {
    qp_enter_error(self_peer(), q.shared, 0);
    BiasedLock::Guard sq(q.sq_mutex);
    requester_flush(q);
  } else {
    // From RTR on, peers on other hosts may send to this QP over TCP, unless it is connected
    // to a QP of this user on this host (shared memory both ways): the first connection of
    // a process then does not wait for a listener and its thread to start (0.1-0.6 ms each
    // in this guest).
    if (next != IBV_QPS_INIT && !(has_one_peer(q.qpx.qp_base.qp_type) && q.peer_on_this_host))
      wire::ensure_listening();
    q.shared->state.store(next);
  }
  q.attr.qp_state = next;
  qp->state = next;
  return 0;
}

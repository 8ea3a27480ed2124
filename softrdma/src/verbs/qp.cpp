// Queue pairs: create (legacy and extended), query, destroy.
#include <cerrno>
#include <cstring>

#include "common/export.hpp"
#include "engine/progress.hpp"
#include "engine/qp_types.hpp"
#include "engine/recv_queue.hpp"
#include "engine/registry.hpp"
#include "engine/transmit.hpp"
#include "verbs/device_limits.hpp"
#include "verbs/objects.hpp"
#include "verbs/ops.hpp"
#include "wire/listener.hpp"

using namespace softrdma;

namespace {

// An XRC_RECV QP only takes requests into its domain's SRQs: no PD, CQs or queues. An
// XRC_SEND QP only sends: no receive side.
int check_objects(const ibv_qp_init_attr_ex& a) {
  const bool has_xrcd = a.xrcd != nullptr;
  if (a.qp_type == IBV_QPT_XRC_RECV) return has_xrcd ? 0 : EINVAL;
  if (has_xrcd || !a.send_cq || !a.pd) return EINVAL;
  if (a.qp_type == IBV_QPT_XRC_SEND) return a.srq ? EINVAL : 0;
  return a.recv_cq ? 0 : EINVAL;
}

bool has_own_receive_queue(const ibv_qp_init_attr_ex& a) {
  return !a.srq && a.qp_type != IBV_QPT_XRC_SEND && a.qp_type != IBV_QPT_XRC_RECV;
}

int check_caps(const ibv_qp_init_attr_ex& a) {
  if (!supported_qp_type(a.qp_type)) return EOPNOTSUPP;
  if (int err = check_objects(a)) return err;
  const ibv_qp_cap& c = a.cap;
  if (c.max_send_wr > static_cast<uint32_t>(limits::kMaxQpWr) ||
      c.max_recv_wr > static_cast<uint32_t>(limits::kMaxQpWr) ||
      c.max_send_sge > static_cast<uint32_t>(limits::kMaxSge) ||
      c.max_recv_sge > static_cast<uint32_t>(limits::kMaxSge) ||
      c.max_inline_data > limits::kMaxInline)
    return EINVAL;
  return 0;
}

void release_blocks(Qp* q) {
  Arena& arena = Arena::self();
  if (q->rq_offset) arena.free(q->rq_offset);
  if (q->offset) arena.free(q->offset);
}

ibv_qp* create_qp(ibv_context* context, ibv_qp_init_attr_ex& a) {
  if (int err = check_caps(a)) {
    errno = err;
    return nullptr;
  }
  // Other hosts reach the QP at its number's port: this process holds that port from its
  // first QP on, or gives out no number another user's listener would be sent to.
  if (int err = wire::hold_listen_port()) {
    errno = err;
    return nullptr;
  }
  Arena& arena = Arena::self();
  auto* q = new (std::nothrow) Qp();
  if (!q) {
    errno = ENOMEM;
    return nullptr;
  }
  q->ctx = to_ctx(context);
  q->offset = arena.allocate(sizeof(QpShared));
  if (has_own_receive_queue(a)) {
    const uint32_t sges = std::max<uint32_t>(a.cap.max_recv_sge, 1);
    q->rq_offset = arena.allocate(recv_queue_bytes(a.cap.max_recv_wr, sges));
    if (q->rq_offset) {
      q->rq = arena.at<RecvQueueShared>(q->rq_offset);
      recv_queue_init(q->rq, a.cap.max_recv_wr, sges);
      q->rq->pd_id = to_pd(a.pd)->id;
    }
  }
  const uint32_t qpn = q->offset && (q->rq || !has_own_receive_queue(a))
                           ? Registry::instance().claim_qpn(q->offset, arena.fd())
                           : 0;
  if (!qpn) {
    release_blocks(q);
    delete q;
    errno = ENOMEM;
    return nullptr;
  }
  q->direct_access = &Registry::instance().direct_access(qpn);
  q->region_cache.set_reacher(Registry::instance().reacher_mark(qpn));
  q->shared = arena.at<QpShared>(q->offset);
  QpShared& s = *q->shared;
  s.state.store(IBV_QPS_RESET);
  s.qp_type = a.qp_type;
  s.qpn = qpn;
  s.pd_id = a.pd ? to_pd(a.pd)->id : 0;
  s.port_num = limits::kPortNum;
  s.recv_queue_offset = a.srq ? to_srq(a.srq)->offset : q->rq_offset;
  s.uses_srq = a.srq != nullptr || a.qp_type == IBV_QPT_XRC_RECV;  // into its domain's SRQs
  s.recv_cq_offset = a.recv_cq ? to_cq(a.recv_cq)->offset : 0;
  q->xrcd = to_xrcd(a.xrcd);  // only an XRC_RECV QP has one (check_objects)
  s.xrcd_id = q->xrcd ? q->xrcd->id : 0;
  s.context_offset = q->ctx->shared_offset;
  s.owner_handle = reinterpret_cast<uint64_t>(&q->qpx.qp_base);

  q->send_cq = to_cq(a.send_cq);  // null where the QP type has none (check_objects)
  q->recv_cq = to_cq(a.recv_cq);
  q->srq = to_srq(a.srq);
  // As NICs do, report what the QP really supports: at least what was asked for.
  a.cap.max_inline_data = limits::kMaxInline;
  if (q->rq) a.cap.max_recv_wr = q->rq->capacity;
  q->cap = a.cap;
  q->sq_sig_all = a.sq_sig_all;
  q->pd_id = s.pd_id;
  q->attr.qp_state = IBV_QPS_RESET;
  q->attr.cap = a.cap;

  ibv_qp& base = q->qpx.qp_base;
  base.context = context;
  base.qp_context = a.qp_context;
  base.pd = a.pd;
  base.send_cq = a.send_cq;
  base.recv_cq = a.recv_cq;
  base.srq = a.srq;
  base.handle = qpn;
  base.qp_num = qpn;
  base.state = IBV_QPS_RESET;
  base.qp_type = a.qp_type;
  pthread_mutex_init(&base.mutex, nullptr);
  pthread_cond_init(&base.cond, nullptr);

  if (q->send_cq) q->send_cq->users.fetch_add(1);
  if (q->recv_cq) q->recv_cq->users.fetch_add(1);
  if (q->srq) q->srq->users.fetch_add(1);
  if (a.pd) to_pd(a.pd)->users.fetch_add(1);
  if (q->xrcd) q->xrcd->users.fetch_add(1);
  local_qp_set(qpn, q);
  return &base;
}

}  // namespace

namespace softrdma {

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  constexpr uint32_t kSupportedMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                                      IBV_QP_INIT_ATTR_CREATE_FLAGS |
                                      IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  const bool send_ops = attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if ((attr->comp_mask & ~kSupportedMask) ||
      ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags) ||
      (send_ops && (attr->send_ops_flags & ~supported_send_ops(attr->qp_type)))) {
    errno = EOPNOTSUPP;  // creation flags, and send operations the QP type lacks
    return nullptr;
  }
  // The PD and the XRC domain are given only when comp_mask says so.
  ibv_qp_init_attr_ex a = *attr;
  if (!(a.comp_mask & IBV_QP_INIT_ATTR_PD)) a.pd = nullptr;
  if (!(a.comp_mask & IBV_QP_INIT_ATTR_XRCD)) a.xrcd = nullptr;
  ibv_qp* qp = create_qp(context, a);
  if (!qp) return nullptr;
  attr->cap = a.cap;
  if (send_ops) install_qp_ex_send_ops(*to_qp(qp));
  return qp;
}

}  // namespace softrdma

SOFTRDMA_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  ibv_qp_init_attr_ex a{};
  a.qp_context = init->qp_context;
  a.send_cq = init->send_cq;
  a.recv_cq = init->recv_cq;
  a.srq = init->srq;
  a.cap = init->cap;
  a.qp_type = init->qp_type;
  a.sq_sig_all = init->sq_sig_all;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = pd;
  ibv_qp* qp = create_qp(pd->context, a);
  if (qp) init->cap = a.cap;
  return qp;
}

SOFTRDMA_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  // Only QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS have the extended send API.
  Qp* q = to_qp(qp);
  return q->wr_batch ? &q->qpx : nullptr;
}

SOFTRDMA_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  Qp& q = *to_qp(qp);
  {
    std::lock_guard lock(q.attr_mutex);
    *attr = q.attr;
  }
  attr->qp_state = static_cast<ibv_qp_state>(q.shared->state.load());
  attr->cur_qp_state = attr->qp_state;
  attr->cap = q.cap;
  if (init) {
    std::memset(init, 0, sizeof *init);
    init->qp_context = qp->qp_context;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->srq = qp->srq;
    init->cap = q.cap;
    init->qp_type = qp->qp_type;
    init->sq_sig_all = q.sq_sig_all;
  }
  return 0;
}

SOFTRDMA_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  Qp* q = to_qp(qp);
  wire::send_deferred_answers_before_leaving();
  // First: the helper threads (a TCP answer or acknowledgement being handled, a lost link's
  // walk over the QPs) can no longer reach it, and those using it finish before this goes on.
  local_qp_set(qp->qp_num, nullptr);
  progress_forget(q);
  detach_all_groups(*q);
  q->shared->state.store(IBV_QPS_RESET);
  Registry::instance().release_qpn(qp->qp_num);  // waits for peers inside the QP
  if (q->send_cq) q->send_cq->users.fetch_sub(1);
  if (q->recv_cq) q->recv_cq->users.fetch_sub(1);
  if (q->srq) q->srq->users.fetch_sub(1);
  if (qp->pd) to_pd(qp->pd)->users.fetch_sub(1);
  if (q->xrcd) q->xrcd->users.fetch_sub(1);
  release_blocks(q);
  {
    BiasedLock::Guard lock(q->sq_mutex);
    for (const SendWork& w : q->inflight) release_payload(w);
  }
  delete q;
  return 0;
}

SOFTRDMA_EXPORT int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t flags) {
  // Copies run front to back, so the data of a message is written in order.
  return flags == 0 ? 1 : 0;
}

// Shared receive queues: basic ones (ibv_create_srq) and XRC SRQs (ibv_create_srq_ex with
// IBV_SRQT_XRC), which take the requests that an XRC_RECV QP of their domain receives.
#include <cerrno>

#include "common/export.hpp"
#include "engine/recv_queue.hpp"
#include "engine/registry.hpp"
#include "verbs/device_limits.hpp"
#include "verbs/objects.hpp"
#include "verbs/ops.hpp"

using namespace softrdma;

namespace {

bool valid_attr(const ibv_srq_attr& a) {
  return a.max_wr >= 1 && a.max_wr <= static_cast<uint32_t>(limits::kMaxSrqWr) &&
         a.max_sge <= static_cast<uint32_t>(limits::kMaxSge) && a.srq_limit <= a.max_wr;
}

// Publishes an XRC SRQ in the host's QP table, so that a responder finds its queue, PD and
// CQ by the number a request carries. False when the table is full.
bool publish_xrc_entry(Srq& s, uint32_t pd_id, const Context& ctx) {
  Arena& arena = Arena::self();
  s.entry_offset = arena.allocate(sizeof(QpShared));
  if (!s.entry_offset) return false;
  // Filled before claim_qpn publishes it (a release store of the slot's state); the number
  // comes last: a responder takes the entry only once it carries its number.
  auto* e = new (arena.at<QpShared>(s.entry_offset)) QpShared();
  e->qp_type = kXrcSrqEntry;
  e->pd_id = pd_id;
  e->recv_queue_offset = s.offset;
  e->recv_cq_offset = s.cq->offset;
  e->context_offset = ctx.shared_offset;
  e->owner_handle = reinterpret_cast<uint64_t>(&s.srq);
  e->uses_srq = 1;
  e->xrcd_id = s.xrcd->id;
  const uint32_t srqn = Registry::instance().claim_qpn(s.entry_offset, arena.fd());
  if (!srqn) {
    arena.free(s.entry_offset);
    s.entry_offset = 0;
    return false;
  }
  e->qpn = srqn;
  s.srq_num = srqn;
  return true;
}

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr_ex& init, Xrcd* xrcd, Cq* cq) {
  ibv_srq_attr& a = init.attr;
  if (!valid_attr(a)) {
    errno = EINVAL;
    return nullptr;
  }
  const uint32_t max_sge = std::max<uint32_t>(a.max_sge, 1);
  Arena& arena = Arena::self();
  const uint64_t off = arena.allocate(recv_queue_bytes(a.max_wr, max_sge));
  auto* srq = off ? new (std::nothrow) Srq() : nullptr;
  if (!srq) {
    if (off) arena.free(off);
    errno = ENOMEM;
    return nullptr;
  }
  srq->offset = off;
  srq->xrcd = xrcd;
  srq->cq = cq;
  Context& ctx = *to_ctx(pd->context);
  if (xrcd && !publish_xrc_entry(*srq, to_pd(pd)->id, ctx)) {
    arena.free(off);
    delete srq;
    errno = ENOMEM;
    return nullptr;
  }
  srq->shared = arena.at<RecvQueueShared>(off);
  recv_queue_init(srq->shared, a.max_wr, max_sge);
  srq->shared->is_srq = 1;
  srq->shared->limit = a.srq_limit;
  srq->shared->pd_id = to_pd(pd)->id;
  srq->shared->context_offset = ctx.shared_offset;
  srq->shared->owner_handle = reinterpret_cast<uint64_t>(&srq->srq);
  srq->max_wr = srq->shared->capacity;  // at least what was asked for, as a NIC reports
  srq->max_sge = max_sge;
  ibv_srq& v = srq->srq;
  v.context = pd->context;
  v.srq_context = init.srq_context;
  v.pd = pd;
  v.handle = static_cast<uint32_t>(off / Arena::kAlign);
  pthread_mutex_init(&v.mutex, nullptr);
  pthread_cond_init(&v.cond, nullptr);
  to_pd(pd)->users.fetch_add(1);
  if (xrcd) xrcd->users.fetch_add(1);
  if (cq) cq->users.fetch_add(1);
  a.max_sge = max_sge;
  a.max_wr = srq->max_wr;
  return &v;
}

}  // namespace

namespace softrdma {

ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* init) {
  constexpr uint32_t kKnown =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  const uint32_t mask = init->comp_mask;
  const ibv_srq_type type = (mask & IBV_SRQ_INIT_ATTR_TYPE) ? init->srq_type : IBV_SRQT_BASIC;
  if ((mask & ~kKnown) || (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC)) {
    errno = EOPNOTSUPP;  // tag matching SRQs
    return nullptr;
  }
  ibv_pd* pd = (mask & IBV_SRQ_INIT_ATTR_PD) ? init->pd : nullptr;
  if (!pd || pd->context != context) {
    errno = EINVAL;
    return nullptr;
  }
  if (type == IBV_SRQT_BASIC) return create_srq(pd, *init, nullptr, nullptr);
  // An XRC SRQ completes into its own CQ and belongs to a domain.
  ibv_xrcd* xrcd = (mask & IBV_SRQ_INIT_ATTR_XRCD) ? init->xrcd : nullptr;
  ibv_cq* cq = (mask & IBV_SRQ_INIT_ATTR_CQ) ? init->cq : nullptr;
  if (!xrcd || !cq || xrcd->context != context || cq->context != context) {
    errno = EINVAL;
    return nullptr;
  }
  return create_srq(pd, *init, to_xrcd(xrcd), to_cq(cq));
}

int get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
  const Srq& s = *to_srq(srq);
  if (!s.xrcd) return EINVAL;  // only XRC SRQs are addressed by number
  *srq_num = s.srq_num;
  return 0;
}

}  // namespace softrdma

SOFTRDMA_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* init) {
  ibv_srq_init_attr_ex ex{};
  ex.srq_context = init->srq_context;
  ex.attr = init->attr;
  ibv_srq* srq = create_srq(pd, ex, nullptr, nullptr);
  init->attr = ex.attr;
  return srq;
}

SOFTRDMA_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  Srq& s = *to_srq(srq);
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  if (mask & IBV_SRQ_MAX_WR) return EOPNOTSUPP;  // resizing an SRQ is not supported
  if (mask & IBV_SRQ_LIMIT) {
    if (attr->srq_limit > s.max_wr) return EINVAL;
    SharedBiasedLock::Guard guard(s.shared->lock);
    s.shared->limit = attr->srq_limit;
  }
  return 0;
}

SOFTRDMA_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  Srq& s = *to_srq(srq);
  SharedBiasedLock::Guard guard(s.shared->lock);
  attr->max_wr = s.max_wr;
  attr->max_sge = s.max_sge;
  attr->srq_limit = s.shared->limit;
  return 0;
}

SOFTRDMA_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  Srq* s = to_srq(srq);
  if (s->users.load() != 0) return EBUSY;
  Arena& arena = Arena::self();
  if (s->xrcd) {
    // Out of the QP table first: this waits for responders delivering into it.
    Registry::instance().release_qpn(s->srq_num);
    arena.free(s->entry_offset);
    s->xrcd->users.fetch_sub(1);
    s->cq->users.fetch_sub(1);
  }
  to_pd(srq->pd)->users.fetch_sub(1);
  arena.free(s->offset);
  delete s;
  return 0;
}

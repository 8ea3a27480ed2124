// Shared receive queues.
#include <cerrno>

#include "common/export.hpp"
#include "engine/recv_queue.hpp"
#include "verbs/device_limits.hpp"
#include "verbs/objects.hpp"

using namespace softrdma;

SOFTRDMA_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* init) {
  ibv_srq_attr& a = init->attr;
  if (a.max_wr < 1 || a.max_wr > static_cast<uint32_t>(limits::kMaxSrqWr) ||
      a.max_sge > static_cast<uint32_t>(limits::kMaxSge) || a.srq_limit > a.max_wr) {
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
  srq->shared = arena.at<RecvQueueShared>(off);
  recv_queue_init(srq->shared, a.max_wr, max_sge);
  srq->shared->is_srq = 1;
  srq->shared->limit = a.srq_limit;
  srq->shared->pd_id = to_pd(pd)->id;
  srq->shared->context_offset = to_ctx(pd->context)->shared_offset;
  srq->shared->owner_handle = reinterpret_cast<uint64_t>(&srq->srq);
  srq->max_wr = a.max_wr;
  srq->max_sge = max_sge;
  srq->srq.context = pd->context;
  srq->srq.srq_context = init->srq_context;
  srq->srq.pd = pd;
  srq->srq.handle = static_cast<uint32_t>(off / Arena::kAlign);
  pthread_mutex_init(&srq->srq.mutex, nullptr);
  pthread_cond_init(&srq->srq.cond, nullptr);
  to_pd(pd)->users.fetch_add(1);
  a.max_sge = max_sge;
  return &srq->srq;
}

SOFTRDMA_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  Srq& s = *to_srq(srq);
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  if (mask & IBV_SRQ_MAX_WR) return EOPNOTSUPP;  // resizing an SRQ is not supported
  if (mask & IBV_SRQ_LIMIT) {
    if (attr->srq_limit > s.max_wr) return EINVAL;
    ProcessLockGuard guard(s.shared->lock);
    s.shared->limit = attr->srq_limit;
  }
  return 0;
}

SOFTRDMA_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  Srq& s = *to_srq(srq);
  ProcessLockGuard guard(s.shared->lock);
  attr->max_wr = s.max_wr;
  attr->max_sge = s.max_sge;
  attr->srq_limit = s.shared->limit;
  return 0;
}

SOFTRDMA_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  Srq* s = to_srq(srq);
  if (s->users.load() != 0) return EBUSY;
  to_pd(srq->pd)->users.fetch_sub(1);
  Arena::self().free(s->offset);
  delete s;
  return 0;
}

// The data-path entry points behind ibv_post_send, ibv_post_recv and ibv_post_srq_recv.
#include <cerrno>

#include "engine/recv_queue.hpp"
#include "engine/requester.hpp"
#include "engine/responder.hpp"
#include "verbs/objects.hpp"
#include "verbs/ops.hpp"
#include "wire/application_looks.hpp"

namespace softrdma {

namespace {

int post_under_lock(Qp& q, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  BiasedLock::Guard lock(q.sq_mutex);
  for (; wr; wr = wr->next) {
    // Only a type 2 window is bound by a work request; type 1 goes through ibv_bind_mw.
    const bool type1_bind =
        wr->opcode == IBV_WR_BIND_MW && wr->bind_mw.mw && wr->bind_mw.mw->type != IBV_MW_TYPE_2;
    if (int err = type1_bind ? EINVAL : requester_post(q, *wr)) {
      *bad_wr = wr;
      return err;
    }
  }
  return 0;
}

}  // namespace

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  const int err = post_under_lock(*to_qp(qp), wr, bad_wr);
  // Outside the lock: what the look serves may complete a request of this very QP.
  wire::look_after_post();
  return err;
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp& q = *to_qp(qp);
  const uint32_t state = q.shared->state.load(std::memory_order_acquire);
  int err = 0;
  if (state == IBV_QPS_RESET || !q.rq) err = EINVAL;  // an SRQ's QP takes no receives
  for (; wr && !err; wr = wr->next) {
    err = recv_queue_post(q.rq, *wr);
    if (err) break;
  }
  if (err) *bad_wr = wr;
  // In ERROR, receives complete at once with a flush status.
  if (state == IBV_QPS_ERR || q.shared->state.load() == IBV_QPS_ERR)
    flush_receive_queue(self_peer(), q.shared);
  return err;
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Srq& s = *to_srq(srq);
  for (; wr; wr = wr->next) {
    if (int err = recv_queue_post(s.shared, *wr)) {
      *bad_wr = wr;
      return err;
    }
  }
  return 0;
}

}  // namespace softrdma

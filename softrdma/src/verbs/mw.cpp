// Memory windows: ibv_alloc_mw, ibv_dealloc_mw and ibv_bind_mw (type 1; a type 2 window is
// bound with an IBV_WR_BIND_MW work request). The checks and the binding itself are in
// engine/memory_windows.
#include <cerrno>
#include <mutex>

#include "engine/memory_windows.hpp"
#include "engine/requester.hpp"
#include "verbs/objects.hpp"
#include "verbs/ops.hpp"

namespace softrdma {

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
    errno = EINVAL;
    return nullptr;
  }
  auto* mw = new (std::nothrow) ibv_mw();
  const uint32_t key =
      mw ? Registry::instance().claim_window(
               to_pd(pd)->id, type == IBV_MW_TYPE_1 ? KeyKind::kWindowType1 : KeyKind::kWindowType2)
         : 0;
  if (!key) {
    delete mw;
    errno = ENOMEM;
    return nullptr;
  }
  mw->context = pd->context;
  mw->pd = pd;
  mw->rkey = mw->handle = key;
  mw->type = type;
  to_pd(pd)->users.fetch_add(1);
  return mw;
}

int dealloc_mw(ibv_mw* mw) {
  release_window(mw->rkey);
  to_pd(mw->pd)->users.fetch_sub(1);
  delete mw;
  return 0;
}

// verbs.h has checked the type and the region's PD. The bind is a work request of the QP:
// it completes (IBV_WC_BIND_MW) in order with the others, and the window has its new key
// from now on, as on rxe.
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  ibv_send_wr wr{};
  wr.wr_id = mw_bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = mw_bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = mw_bind->bind_info;
  Qp& q = *to_qp(qp);
  BiasedLock::Guard lock(q.sq_mutex);
  const int err = requester_post(q, wr);
  if (!err) mw->rkey = wr.bind_mw.rkey;
  return err;
}

}  // namespace softrdma

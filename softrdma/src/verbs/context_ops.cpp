#include "verbs/objects.hpp"
#include "verbs/ops.hpp"

namespace softrdma {

void install_context_ops(verbs_context& vctx) {
  ibv_context_ops& ops = vctx.context.ops;
  ops.poll_cq = poll_cq;
  ops.req_notify_cq = req_notify_cq;
  ops.post_send = post_send;
  ops.post_recv = post_recv;
  ops.post_srq_recv = post_srq_recv;
  ops.alloc_mw = alloc_mw;
  ops.dealloc_mw = dealloc_mw;
  ops.bind_mw = bind_mw;
  vctx.create_qp_ex = create_qp_ex;
  vctx.advise_mr = advise_mr;
  vctx.alloc_td = alloc_td;
  vctx.dealloc_td = dealloc_td;
  vctx.alloc_parent_domain = alloc_parent_domain;
  vctx.create_cq_ex = create_cq_ex;
  vctx.open_xrcd = open_xrcd;
  vctx.close_xrcd = close_xrcd;
  vctx.create_srq_ex = create_srq_ex;
  vctx.get_srq_num = get_srq_num;
}

}  // namespace softrdma

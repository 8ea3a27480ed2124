// The per-context operations that verbs.h's inline functions call through ibv_context.ops
// and struct verbs_context, implemented across the verbs/*.cpp files.
#pragma once

#include <infiniband/verbs.h>

#include "verbs/gid_table.hpp"

namespace softrdma {

void install_context_ops(verbs_context& vctx);

int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr);

const GidTable& context_gids(ibv_context* context);

}  // namespace softrdma

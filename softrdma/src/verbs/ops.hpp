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
ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int dealloc_mw(ibv_mw* mw);
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);
ibv_td* alloc_td(ibv_context* context, ibv_td_init_attr* attr);
int dealloc_td(ibv_td* td);
ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr);
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge);

ibv_xrcd* open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr);
int close_xrcd(ibv_xrcd* xrcd);
ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr);
int get_srq_num(ibv_srq* srq, uint32_t* srq_num);

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr);

struct Cq;
/// The ibv_wc_flags a CQ created with ibv_create_cq_ex can report (ibv_wc_read_*).
inline constexpr uint64_t kSupportedWcFlags = IBV_WC_STANDARD_FLAGS;
/// Gives `c` the polling operations of the extended CQ API (verbs/cq_ex_poll.cpp).
void install_cq_ex_ops(Cq& c);

struct Qp;
/// The IBV_QP_EX_WITH_* operations the extended send API offers on a QP of `type`.
uint64_t supported_send_ops(ibv_qp_type type);
/// Gives `q` the ibv_wr_* operations of its type (verbs/qp_ex_send.cpp).
void install_qp_ex_send_ops(Qp& q);

const GidTable& context_gids(ibv_context* context);

}  // namespace softrdma

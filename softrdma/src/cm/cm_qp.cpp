// QPs and SRQs on rdma_cm_ids: rdma_create_qp(_ex), rdma_destroy_qp, rdma_create_srq(_ex),
// rdma_destroy_srq. Missing CQs are created (each with its completion channel), as
// librdmacm does, and destroyed with the QP.
#include <rdma/rdma_verbs.h>
#include <cerrno>

#include "cm/cm_context.hpp"
#include "cm/cm_engine.hpp"
#include "cm/cm_objects.hpp"
#include "common/export.hpp"

namespace softrdma::cm {
namespace {

// Creates a CQ of `depth` entries with its own completion channel.
bool make_cq(rdma_cm_id* id, uint32_t depth, ibv_comp_channel** channel, ibv_cq** cq) {
  ibv_context* ctx = id->verbs;
  *channel = ibv_create_comp_channel(ctx);
  if (!*channel) return false;
  *cq = ibv_create_cq(ctx, static_cast<int>(std::max<uint32_t>(depth, 1)), id, *channel, 0);
  if (*cq) return true;
  ibv_destroy_comp_channel(*channel);
  *channel = nullptr;
  return false;
}

void destroy_cq(ibv_comp_channel** channel, ibv_cq** cq) {
  if (*cq) ibv_destroy_cq(*cq);
  if (*channel) ibv_destroy_comp_channel(*channel);
  *cq = nullptr;
  *channel = nullptr;
}

// The CQs librdmacm would create: the ones the attributes leave unset.
bool ensure_cqs(rdma_cm_id* id, ibv_qp_init_attr& attr, bool need_send) {
  if (need_send && !attr.send_cq) {
    if (!id->send_cq && !make_cq(id, attr.cap.max_send_wr, &id->send_cq_channel, &id->send_cq))
      return false;
    attr.send_cq = id->send_cq;
  }
  if (!attr.recv_cq) {
    if (!id->recv_cq && !make_cq(id, attr.cap.max_recv_wr, &id->recv_cq_channel, &id->recv_cq))
      return false;
    attr.recv_cq = id->recv_cq;
  }
  return true;
}

}  // namespace

int create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* init) {
  if (!init) return fail(EINVAL);
  if (!id->verbs) id->verbs = cm_context();
  if (!id->verbs) return fail(ENODEV);
  if (!pd) pd = default_pd(id->verbs);
  ibv_qp_init_attr attr = *init;
  // Endpoints (rdma_create_ep) leave the type to the id, which has it from rdma_getaddrinfo.
  if (attr.qp_type == 0) attr.qp_type = id->qp_type;
  if (!attr.srq && id->srq) attr.srq = id->srq;
  if (!ensure_cqs(id, attr, true)) return -1;
  ibv_qp* qp = ibv_create_qp(pd, &attr);
  if (!qp) return -1;
  init->cap = attr.cap;
  init->send_cq = attr.send_cq;
  init->recv_cq = attr.recv_cq;
  // RC: INIT now, RTR and RTS when the connection is made. UD: ready to send at once.
  std::lock_guard lock(cm_mutex());
  CmId* cm = to_id(id);
  const bool ud = qp->qp_type == IBV_QPT_UD;
  for (ibv_qp_state step : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    if (!ud && step != IBV_QPS_INIT) break;
    ibv_qp_attr a{};
    a.qp_state = step;
    int mask = 0;
    int err = connection_qp_attr(cm, &a, &mask);
    if (!err) err = ibv_modify_qp(qp, &a, mask);
    if (err) {
      ibv_destroy_qp(qp);
      return fail(err);
    }
  }
  // Published under cm_mutex: the CM thread reads them when a connection completes or ends.
  id->qp = qp;
  id->pd = pd;
  if (qp->qp_type == IBV_QPT_RC) cm->rc_qpn = qp->qp_num;
  return 0;
}

}  // namespace softrdma::cm

using namespace softrdma::cm;

SOFTRDMA_EXPORT int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* attr) {
  return create_qp(id, pd, attr);
}

SOFTRDMA_EXPORT int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  if (!attr || (attr->comp_mask & ~static_cast<uint32_t>(IBV_QP_INIT_ATTR_PD)))
    return fail(EOPNOTSUPP);
  ibv_qp_init_attr legacy{};
  legacy.qp_context = attr->qp_context;
  legacy.send_cq = attr->send_cq;
  legacy.recv_cq = attr->recv_cq;
  legacy.srq = attr->srq;
  legacy.cap = attr->cap;
  legacy.qp_type = attr->qp_type;
  legacy.sq_sig_all = attr->sq_sig_all;
  const int rc =
      create_qp(id, (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr, &legacy);
  if (rc == 0) attr->cap = legacy.cap;
  return rc;
}

SOFTRDMA_EXPORT void rdma_destroy_qp(rdma_cm_id* id) {
  ibv_qp* qp;
  {
    std::lock_guard lock(cm_mutex());
    to_id(id)->rc_qpn = 0;
    qp = id->qp;
    id->qp = nullptr;
  }
  if (qp) ibv_destroy_qp(qp);
  destroy_cq(&id->send_cq_channel, &id->send_cq);
  if (!id->srq) destroy_cq(&id->recv_cq_channel, &id->recv_cq);
}

SOFTRDMA_EXPORT int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (!attr) return fail(EINVAL);
  if (!id->verbs) id->verbs = cm_context();
  if (!pd) pd = default_pd(id->verbs);
  if (!id->recv_cq && !make_cq(id, attr->attr.max_wr, &id->recv_cq_channel, &id->recv_cq))
    return -1;
  ibv_srq* srq = ibv_create_srq(pd, attr);
  if (!srq) return -1;
  id->srq = srq;
  id->pd = pd;
  return 0;
}

SOFTRDMA_EXPORT int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  if (!attr ||
      (attr->comp_mask & ~static_cast<uint32_t>(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE)) ||
      ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC))
    return fail(EOPNOTSUPP);
  ibv_srq_init_attr basic{};
  basic.srq_context = attr->srq_context;
  basic.attr = attr->attr;
  return rdma_create_srq(id, (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? attr->pd : nullptr, &basic);
}

SOFTRDMA_EXPORT void rdma_destroy_srq(rdma_cm_id* id) {
  if (id->srq) ibv_destroy_srq(id->srq);
  id->srq = nullptr;
  if (!id->qp) destroy_cq(&id->recv_cq_channel, &id->recv_cq);
}

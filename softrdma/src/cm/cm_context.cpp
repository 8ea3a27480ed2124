#include "cm/cm_context.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

namespace softrdma::cm {

ibv_context* cm_context() {
  static std::mutex mutex;
  static ibv_context* ctx = nullptr;
  std::lock_guard lock(mutex);
  if (!ctx) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list && n > 0) ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
  }
  return ctx;
}

ibv_pd* default_pd(ibv_context* ctx) {
  static std::mutex mutex;
  // Process-lifetime objects, as in librdmacm; reachable, so not reported as leaks.
  static auto* pds = new std::map<ibv_context*, ibv_pd*>();
  std::lock_guard lock(mutex);
  ibv_pd*& pd = (*pds)[ctx];
  if (!pd) pd = ibv_alloc_pd(ctx);
  return pd;
}

void attach_to_device(rdma_cm_id* id) {
  id->verbs = cm_context();
  id->port_num = 1;
  if (id->verbs && !id->pd) id->pd = default_pd(id->verbs);
}

void gid_of(const sockaddr* addr, uint8_t gid[16]) {
  std::memset(gid, 0, 16);
  if (!addr || addr->sa_family != AF_INET) return;
  gid[10] = gid[11] = 0xff;
  std::memcpy(gid + 12, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, 4);
}

uint8_t local_gid_index(const CmId* id) {
  uint8_t want[16];
  gid_of(&id->id.route.addr.src_addr, want);
  ibv_context* ctx = id->id.verbs ? id->id.verbs : cm_context();
  ibv_port_attr port{};
  if (!ctx || ibv_query_port(ctx, 1, &port) != 0) return 0;
  for (int i = 0; i < port.gid_tbl_len; ++i) {
    ibv_gid g{};
    if (ibv_query_gid(ctx, 1, i, &g) == 0 && std::memcmp(g.raw, want, 16) == 0)
      return static_cast<uint8_t>(i);
  }
  return 0;
}

ibv_ah_attr address_to(ibv_context*, const uint8_t gid[16], uint8_t sgid_index) {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  std::memcpy(ah.grh.dgid.raw, gid, 16);
  ah.grh.sgid_index = sgid_index;
  ah.grh.hop_limit = 64;
  ah.port_num = 1;
  return ah;
}

int connection_qp_attr(CmId* id, ibv_qp_attr* attr, int* mask) {
  const bool ud = id->id.qp_type == IBV_QPT_UD || id->id.ps == RDMA_PS_UDP;
  const ibv_qp_state want = attr->qp_state;
  std::memset(attr, 0, sizeof *attr);
  attr->qp_state = want;
  switch (want) {
    case IBV_QPS_INIT:
      attr->pkey_index = 0;
      attr->port_num = 1;
      *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (ud) {
        attr->qkey = RDMA_UDP_QKEY;
        *mask |= IBV_QP_QKEY;
      } else {
        attr->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        *mask |= IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTR:
      *mask = IBV_QP_STATE;
      if (ud) return 0;
      if (id->peer.magic != kCmMagic) return EINVAL;  // nothing negotiated yet
      attr->path_mtu = IBV_MTU_4096;
      attr->dest_qp_num = id->peer.qpn;
      attr->rq_psn = id->peer.psn;
      // The peer's initiator depth is what we must be able to respond to.
      attr->max_dest_rd_atomic = std::max<uint8_t>(id->peer.initiator_depth, 1);
      attr->min_rnr_timer = 12;
      attr->ah_attr = address_to(id->id.verbs, id->peer.gid, local_gid_index(id));
      *mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      return 0;
    case IBV_QPS_RTS:
      attr->sq_psn = id->local_psn;
      *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (ud) return 0;
      attr->timeout = id->ack_timeout;
      attr->retry_cnt = std::min<uint8_t>(id->retry_count, 7);
      attr->rnr_retry = std::min<uint8_t>(id->rnr_retry_count, 7);
      attr->max_rd_atomic = std::max<uint8_t>(id->peer.responder_resources, 1);
      *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      return 0;
    default:
      return EINVAL;
  }
}

int connect_qp(CmId* id) {
  ibv_qp* qp = id->id.qp;
  if (!qp) return 0;
  for (ibv_qp_state step : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    if (step == IBV_QPS_INIT && qp->state != IBV_QPS_RESET) continue;
    ibv_qp_attr attr{};
    attr.qp_state = step;
    int mask = 0;
    if (int err = connection_qp_attr(id, &attr, &mask)) return err;
    if (int err = ibv_modify_qp(qp, &attr, mask)) return err;
  }
  return 0;
}

}  // namespace softrdma::cm

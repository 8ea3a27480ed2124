// The remaining public verbs: strings, rates, fork support, sysfs access, kernel-struct
// conversions, and the features softrdma does not offer (they fail with EOPNOTSUPP).
#include <fcntl.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "common/export.hpp"
#include "verbs/objects.hpp"

using namespace softrdma;

SOFTRDMA_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const names[] = {"success",
                                      "local length error",
                                      "local QP operation error",
                                      "local EE context operation error",
                                      "local protection error",
                                      "Work Request Flushed Error",
                                      "memory management operation error",
                                      "bad response error",
                                      "local access error",
                                      "remote invalid request error",
                                      "remote access error",
                                      "remote operation error",
                                      "transport retry counter exceeded",
                                      "RNR retry counter exceeded",
                                      "local RDD violation error",
                                      "remote invalid RD request",
                                      "aborted error",
                                      "invalid EE context number",
                                      "invalid EE context state",
                                      "fatal error",
                                      "response timeout error",
                                      "general error",
                                      "TM error",
                                      "TM rendezvous error"};
  const auto i = static_cast<size_t>(status);
  return i < sizeof names / sizeof names[0] ? names[i] : "unknown";
}

SOFTRDMA_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const names[] = {"CQ error",
                                      "local work queue catastrophic error",
                                      "invalid request local work queue error",
                                      "local access violation work queue error",
                                      "communication established",
                                      "send queue drained",
                                      "path migrated",
                                      "path migration request error",
                                      "local catastrophic error",
                                      "port active",
                                      "port error",
                                      "LID change",
                                      "P_Key change",
                                      "SM change",
                                      "SRQ catastrophic error",
                                      "SRQ limit reached",
                                      "last WQE reached",
                                      "client reregistration",
                                      "GID table change",
                                      "WQ fatal"};
  const auto i = static_cast<size_t>(event);
  return i < sizeof names / sizeof names[0] ? names[i] : "unknown";
}

SOFTRDMA_EXPORT const char* ibv_node_type_str(ibv_node_type type) {
  switch (type) {
    case IBV_NODE_CA:
      return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH:
      return "InfiniBand switch";
    case IBV_NODE_ROUTER:
      return "InfiniBand router";
    case IBV_NODE_RNIC:
      return "iWARP NIC";
    case IBV_NODE_USNIC:
      return "usNIC";
    case IBV_NODE_USNIC_UDP:
      return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED:
      return "unspecified";
    default:
      return "unknown";
  }
}

SOFTRDMA_EXPORT const char* ibv_port_state_str(ibv_port_state state) {
  static const char* const names[] = {"no state change (NOP)", "down", "init", "armed", "active",
                                      "active deferred"};
  const auto i = static_cast<size_t>(state);
  return i < sizeof names / sizeof names[0] ? names[i] : "unknown";
}

namespace {
// IBTA static rate encodings: (rate enum, Gb/s * 10 / 25 multiple, Mb/s).
struct RateRow {
  ibv_rate rate;
  int mult;
  int mbps;
};
constexpr RateRow kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},     {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},  {IBV_RATE_14_GBPS, 5, 14062},
    {IBV_RATE_56_GBPS, 22, 56250},    {IBV_RATE_112_GBPS, 45, 112500},
    {IBV_RATE_168_GBPS, 67, 168750},  {IBV_RATE_25_GBPS, 10, 25781},
    {IBV_RATE_100_GBPS, 40, 103125},  {IBV_RATE_200_GBPS, 80, 206250},
    {IBV_RATE_300_GBPS, 120, 309375}, {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},    {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},
};
}  // namespace

SOFTRDMA_EXPORT int ibv_rate_to_mult(ibv_rate rate) {
  for (const RateRow& r : kRates)
    if (r.rate == rate) return r.mult;
  return -1;
}

SOFTRDMA_EXPORT ibv_rate mult_to_ibv_rate(int mult) {
  for (const RateRow& r : kRates)
    if (r.mult == mult) return r.rate;
  return IBV_RATE_MAX;
}

SOFTRDMA_EXPORT int ibv_rate_to_mbps(ibv_rate rate) {
  for (const RateRow& r : kRates)
    if (r.rate == rate) return r.mbps;
  return -1;
}

SOFTRDMA_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const RateRow& r : kRates)
    if (r.mbps == mbps) return r.rate;
  return IBV_RATE_MAX;
}

// Registered memory is reached by copies, never by DMA, so fork() needs no preparation.
SOFTRDMA_EXPORT int ibv_fork_init() {
  return 0;
}
SOFTRDMA_EXPORT ibv_fork_status ibv_is_fork_initialized() {
  return IBV_FORK_UNNEEDED;
}
SOFTRDMA_EXPORT int ibv_dontfork_range(void*, size_t) {
  return 0;
}
SOFTRDMA_EXPORT int ibv_dofork_range(void*, size_t) {
  return 0;
}

SOFTRDMA_EXPORT const char* ibv_get_sysfs_path() {
  return "/sys";
}

// softrdma0 has no sysfs directory: reads fail as for a missing attribute.
SOFTRDMA_EXPORT int ibv_read_sysfs_file(const char*, const char*, char*, size_t) {
  errno = ENOENT;
  return -1;
}

SOFTRDMA_EXPORT int ibv_query_ece(ibv_qp*, ibv_ece*) {
  return EOPNOTSUPP;
}
SOFTRDMA_EXPORT int ibv_set_ece(ibv_qp*, ibv_ece*) {
  return EOPNOTSUPP;
}

SOFTRDMA_EXPORT ibv_dm* ibv_import_dm(ibv_context*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
SOFTRDMA_EXPORT void ibv_unimport_dm(ibv_dm*) {}

SOFTRDMA_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, const ib_uverbs_ah_attr* src) {
  std::memcpy(dst->grh.dgid.raw, src->grh.dgid, 16);
  dst->grh.flow_label = src->grh.flow_label;
  dst->grh.sgid_index = src->grh.sgid_index;
  dst->grh.hop_limit = src->grh.hop_limit;
  dst->grh.traffic_class = src->grh.traffic_class;
  dst->dlid = src->dlid;
  dst->sl = src->sl;
  dst->src_path_bits = src->src_path_bits;
  dst->static_rate = src->static_rate;
  dst->is_global = src->is_global;
  dst->port_num = src->port_num;
}

SOFTRDMA_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, const ib_uverbs_qp_attr* src) {
  dst->cur_qp_state = static_cast<ibv_qp_state>(src->cur_qp_state);
  dst->path_mtu = static_cast<ibv_mtu>(src->path_mtu);
  dst->path_mig_state = static_cast<ibv_mig_state>(src->path_mig_state);
  dst->qkey = src->qkey;
  dst->rq_psn = src->rq_psn;
  dst->sq_psn = src->sq_psn;
  dst->dest_qp_num = src->dest_qp_num;
  dst->qp_access_flags = static_cast<int>(src->qp_access_flags);
  dst->cap.max_send_wr = src->max_send_wr;
  dst->cap.max_recv_wr = src->max_recv_wr;
  dst->cap.max_send_sge = src->max_send_sge;
  dst->cap.max_recv_sge = src->max_recv_sge;
  dst->cap.max_inline_data = src->max_inline_data;
  ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
  ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
  dst->pkey_index = src->pkey_index;
  dst->alt_pkey_index = src->alt_pkey_index;
  dst->en_sqd_async_notify = src->en_sqd_async_notify;
  dst->sq_draining = src->sq_draining;
  dst->max_rd_atomic = src->max_rd_atomic;
  dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
  dst->min_rnr_timer = src->min_rnr_timer;
  dst->port_num = src->port_num;
  dst->timeout = src->timeout;
  dst->retry_cnt = src->retry_cnt;
  dst->rnr_retry = src->rnr_retry;
  dst->alt_port_num = src->alt_port_num;
  dst->alt_timeout = src->alt_timeout;
}

namespace {

// A path record's fields beside its GIDs, the same in the verbs and the kernel layouts but
// for the integer types of a few, in either direction.
template <typename To, typename From>
void copy_path_fields(To* dst, const From* src) {
  auto set = [](auto& to, const auto& from) { to = static_cast<std::decay_t<decltype(to)>>(from); };
  set(dst->dlid, src->dlid);
  set(dst->slid, src->slid);
  set(dst->raw_traffic, src->raw_traffic);
  set(dst->flow_label, src->flow_label);
  set(dst->reversible, src->reversible);
  set(dst->mtu, src->mtu);
  set(dst->pkey, src->pkey);
  set(dst->hop_limit, src->hop_limit);
  set(dst->traffic_class, src->traffic_class);
  set(dst->numb_path, src->numb_path);
  set(dst->sl, src->sl);
  set(dst->mtu_selector, src->mtu_selector);
  set(dst->rate_selector, src->rate_selector);
  set(dst->rate, src->rate);
  set(dst->packet_life_time_selector, src->packet_life_time_selector);
  set(dst->packet_life_time, src->packet_life_time);
  set(dst->preference, src->preference);
}

}  // namespace

SOFTRDMA_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst,
                                                 const ib_user_path_rec* src) {
  std::memcpy(dst->dgid.raw, src->dgid, 16);
  std::memcpy(dst->sgid.raw, src->sgid, 16);
  copy_path_fields(dst, src);
}

SOFTRDMA_EXPORT void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, const ibv_sa_path_rec* src) {
  std::memcpy(dst->dgid, src->dgid.raw, 16);
  std::memcpy(dst->sgid, src->sgid.raw, 16);
  copy_path_fields(dst, src);
}

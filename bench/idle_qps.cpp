// Holds N connected, idle RC QP pairs for S seconds and reports the CPU time the process
// used meanwhile: softrdma must not spin in the background.
#include <infiniband/verbs.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

bool connect(ibv_qp* qp, uint32_t dest, const ibv_gid& gid) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return false;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = dest;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return false;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int pairs = argc > 1 ? std::atoi(argv[1]) : 100;
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 3;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) return std::fprintf(stderr, "no RDMA device\n"), 1;
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_comp_channel* channel = ibv_create_comp_channel(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 4 * pairs + 4, nullptr, channel, 0);
  ibv_req_notify_cq(cq, 0);  // armed, as an event-driven application would leave it
  ibv_gid gid{};
  ibv_query_gid(ctx, 1, 0, &gid);
  std::vector<ibv_qp*> qps;
  for (int i = 0; i < 2 * pairs; ++i) {
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.cap = {16, 16, 1, 1, 0};
    init.qp_type = IBV_QPT_RC;
    qps.push_back(ibv_create_qp(pd, &init));
    if (!qps.back()) return std::fprintf(stderr, "create_qp failed\n"), 1;
  }
  for (int i = 0; i < pairs; ++i)
    if (!connect(qps[2 * i], qps[2 * i + 1]->qp_num, gid) ||
        !connect(qps[2 * i + 1], qps[2 * i]->qp_num, gid))
      return std::fprintf(stderr, "connect failed\n"), 1;
  const double before = cpu_seconds();
  sleep(static_cast<unsigned>(seconds));
  std::printf("qps=%d seconds=%d cpu_seconds=%.4f\n", 2 * pairs, seconds, cpu_seconds() - before);
  for (ibv_qp* qp : qps) ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
  ibv_destroy_comp_channel(channel);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}

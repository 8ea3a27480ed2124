// What setting a connection's verbs objects up and down costs: N times two CQs and an RC QP
// (what rdma_create_qp makes on each side of an RDMA CM connection), all kept until the
// end as a server keeps its connections, then destroyed. Prints microseconds per object.
// The RDMA CM figure it explains is bench/cm_connect_rate's (against plain TCP).
//
// Usage: verbs_setup_cost [N]
//   on softrdma: build/softrdma-run build/bench/verbs_setup_cost
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Microseconds per object of `n` that took `spent` together.
double micros(Clock::duration spent, int n) {
  return std::chrono::duration<double, std::micro>(spent).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  int devices = 0;
  ibv_device** list = ibv_get_device_list(&devices);
  if (!list || devices < 1) {
    std::fprintf(stderr, "verbs_setup_cost: no RDMA device\n");
    return 1;
  }
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
  if (!pd) {
    std::fprintf(stderr, "verbs_setup_cost: cannot open the device\n");
    return 1;
  }
  std::vector<ibv_cq*> cqs;
  std::vector<ibv_qp*> qps;
  Clock::duration cq_time{}, qp_time{};
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    ibv_cq* send_cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    ibv_cq* recv_cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    const auto t1 = Clock::now();
    ibv_qp_init_attr attr{};
    attr.send_cq = send_cq;
    attr.recv_cq = recv_cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 16;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    ibv_qp* qp = send_cq && recv_cq ? ibv_create_qp(pd, &attr) : nullptr;
    const auto t2 = Clock::now();
    if (!qp) {
      std::fprintf(stderr, "verbs_setup_cost: object %d not created\n", i);
      return 1;
    }
    cq_time += t1 - t0;
    qp_time += t2 - t1;
    cqs.push_back(send_cq);
    cqs.push_back(recv_cq);
    qps.push_back(qp);
  }
  const auto d0 = Clock::now();
  for (ibv_qp* qp : qps) ibv_destroy_qp(qp);
  const auto d1 = Clock::now();
  for (ibv_cq* cq : cqs) ibv_destroy_cq(cq);
  const auto d2 = Clock::now();
  std::printf(
      "objects=%d create_cq_us=%.1f create_qp_us=%.1f destroy_qp_us=%.1f destroy_cq_us=%.1f\n", n,
      micros(cq_time, 2 * n), micros(qp_time, n), micros(d1 - d0, n), micros(d2 - d1, 2 * n));
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return 0;
}

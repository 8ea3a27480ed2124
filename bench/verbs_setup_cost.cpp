// What setting a connection's verbs objects up and down costs: N times two CQs and an RC QP
// (what rdma_create_qp makes on each side of an RDMA CM connection), all kept until the
// end as a server keeps its connections, then destroyed. Prints microseconds per object.
// The RDMA CM figure it explains is bench/cm_connect_rate's (against plain TCP). Then what
// registering and deregistering a 16 MiB region costs (a receive ring of an RPC endpoint),
// freshly mapped and with every page written: milliseconds each. Last, a grant: a second,
// short-lived registration of a 1 MiB buffer that stays registered (what the RPC RC
// transport makes for each out-of-line payload), registered and deregistered: microseconds.
//
// With LEFT, a process first creates LEFT QPs and ends without destroying them, as a crashed
// or careless one does: a device that keeps a table of QPs per host must then find room for
// the new ones among the ended process's entries (softrdma's registry holds 16384 per user).
//
// Usage: verbs_setup_cost [N] [LEFT]
//   on softrdma: build/softrdma-run build/bench/verbs_setup_cost
#include <infiniband/verbs.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Microseconds per object of `n` that took `spent` together.
double micros(Clock::duration spent, int n) {
  return std::chrono::duration<double, std::micro>(spent).count() / n;
}

ibv_context* open_first_device() {
  int devices = 0;
  ibv_device** list = ibv_get_device_list(&devices);
  ibv_context* ctx = list && devices > 0 ? ibv_open_device(list[0]) : nullptr;
  if (list) ibv_free_device_list(list);
  return ctx;
}

ibv_qp* new_rc_qp(ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq) {
  ibv_qp_init_attr attr{};
  attr.send_cq = send_cq;
  attr.recv_cq = recv_cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 16;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  return ibv_create_qp(pd, &attr);
}

// A child process creates `left` QPs and exits without destroying them.
void leave_qps_behind(int left) {
  const pid_t child = fork();
  if (child == 0) {
    ibv_context* ctx = open_first_device();
    ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
    ibv_cq* cq = pd ? ibv_create_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
    for (int i = 0; cq && i < left && new_rc_qp(pd, cq, cq); ++i) {
    }
    _exit(0);
  }
  int status = 0;
  if (child > 0) waitpid(child, &status, 0);
}

// Milliseconds to register and to deregister a 16 MiB mapping, fresh or with every page
// written first (medians would hide nothing here: the mean of a few).
struct RegionCost {
  double reg_ms = 0, dereg_ms = 0;
};
RegionCost region_cost(ibv_pd* pd, bool written) {
  constexpr size_t kBytes = size_t{16} << 20;
  constexpr int kTimes = 4;
  RegionCost cost;
  for (int i = 0; i < kTimes; ++i) {
    void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return {};
    if (written) std::memset(p, 0x5a, kBytes);
    const auto t0 = Clock::now();
    ibv_mr* mr = ibv_reg_mr(pd, p, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    const auto t1 = Clock::now();
    if (mr) ibv_dereg_mr(mr);
    const auto t2 = Clock::now();
    munmap(p, kBytes);
    if (!mr) return {};
    cost.reg_ms += micros(t1 - t0, 1000 * kTimes);
    cost.dereg_ms += micros(t2 - t1, 1000 * kTimes);
  }
  return cost;
}

// Microseconds per ibv_reg_mr + ibv_dereg_mr of a registration over a registered 1 MiB
// buffer, with remote read (a grant a peer reads through), the mean of many.
double grant_cost(ibv_pd* pd) {
  constexpr size_t kBytes = size_t{1} << 20;
  constexpr int kTimes = 2000;
  std::vector<char> buffer(kBytes);
  ibv_mr* keep = ibv_reg_mr(pd, buffer.data(), kBytes, IBV_ACCESS_LOCAL_WRITE);
  if (!keep) return 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < kTimes; ++i) {
    ibv_mr* grant = ibv_reg_mr(pd, buffer.data(), kBytes, IBV_ACCESS_REMOTE_READ);
    if (!grant) return 0;
    ibv_dereg_mr(grant);
  }
  const double us = micros(Clock::now() - t0, kTimes);
  ibv_dereg_mr(keep);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int left = argc > 2 ? std::atoi(argv[2]) : 0;
  if (left > 0) leave_qps_behind(left);
  ibv_context* ctx = open_first_device();
  if (!ctx) {
    std::fprintf(stderr, "verbs_setup_cost: no RDMA device\n");
    return 1;
  }
  ibv_pd* pd = ibv_alloc_pd(ctx);
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
    ibv_qp* qp = send_cq && recv_cq ? new_rc_qp(pd, send_cq, recv_cq) : nullptr;
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
  const RegionCost fresh = region_cost(pd, false), written = region_cost(pd, true);
  std::printf(
      "region=16MiB fresh_reg_ms=%.2f fresh_dereg_ms=%.2f written_reg_ms=%.2f "
      "written_dereg_ms=%.2f\n",
      fresh.reg_ms, fresh.dereg_ms, written.reg_ms, written.dereg_ms);
  std::printf("grant=1MiB reg_dereg_us=%.2f\n", grant_cost(pd));
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return 0;
}

// Creates QPs and says which numbers it got: the test of a host's QP table that processes
// fill, leave behind when they end, and reclaim (shared_host_test's QpTable tests).
//
// Usage: qp_claimer COUNT leave      creates COUNT RC QPs, prints how many, and ends without
//                                    destroying them (as a crashed process would)
//        qp_claimer COUNT hold MS    creates COUNT RC QPs, prints "qpn N" for each, and
//                                    keeps them MS milliseconds before it ends
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

ibv_qp* new_rc_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr attr{};
  attr.send_cq = cq;
  attr.recv_cq = cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  return ibv_create_qp(pd, &attr);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[2] : "";
  const long count = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 0;
  if (count <= 0 || (mode != "leave" && !(mode == "hold" && argc > 3))) {
    std::fprintf(stderr, "usage: qp_claimer COUNT leave | qp_claimer COUNT hold MS\n");
    return 2;
  }
  int devices = 0;
  ibv_device** list = ibv_get_device_list(&devices);
  ibv_context* ctx = devices > 0 ? ibv_open_device(list[0]) : nullptr;
  ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
  ibv_cq* cq = pd ? ibv_create_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
  if (!cq) {
    std::fprintf(stderr, "qp_claimer: no device, PD or CQ: %s\n", std::strerror(errno));
    return 1;
  }
  long created = 0;
  for (; created < count; ++created) {
    ibv_qp* qp = new_rc_qp(pd, cq);
    if (!qp) {
      std::fprintf(stderr, "qp_claimer: QP %ld: %s\n", created, std::strerror(errno));
      break;
    }
    if (mode == "hold") std::printf("qpn %u\n", qp->qp_num);
  }
  std::printf("created %ld\n", created);
  std::fflush(stdout);
  if (mode == "leave") _exit(0);  // nothing destroyed: the QPs' slots stay live, their owner gone
  usleep(static_cast<useconds_t>(std::strtol(argv[3], nullptr, 10)) * 1000);
  return created == count ? 0 : 1;
}

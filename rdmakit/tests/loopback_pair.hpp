// Two RC queue pairs of one process connected to each other on softrdma0: the smallest
// setup on which one-sided and two-sided operations run.
#pragma once

#include <chrono>

#include "rdmakit/completion_queue.hpp"
#include "rdmakit/context.hpp"
#include "rdmakit/memory_region.hpp"
#include "rdmakit/queue_pair.hpp"

namespace rdmakit::testing {

struct LoopbackPair {
  Context ctx = Context::open();
  ProtectionDomain pd{ctx};
  CompletionQueue cq_a{ctx, 512};
  CompletionQueue cq_b{ctx, 512};
  QueuePair a = QpBuilder(ctx, pd, cq_a).timeout(10).retry_count(3).build();
  QueuePair b = QpBuilder(ctx, pd, cq_b).timeout(10).retry_count(3).build();

  LoopbackPair() {
    const PathParams path{IBV_MTU_4096, 16, 16};
    a.connect(b.address(), path);
    b.connect(a.address(), path);
  }

  // Polls `cq` until one completion arrives or 5 s pass; returns it (status
  // IBV_WC_GENERAL_ERR with wr_id ~0 when none came).
  static ibv_wc wait_one(const CompletionQueue& cq);
};

inline ibv_wc LoopbackPair::wait_one(const CompletionQueue& cq) {
  ibv_wc wc{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline)
    if (cq.poll({&wc, 1}) == 1) return wc;
  wc.status = IBV_WC_GENERAL_ERR;
  wc.wr_id = ~0ull;
  return wc;
}

// Posts one signalled one-sided operation (RDMA READ or WRITE between `local` and `remote`)
// on `qp` and waits for its completion on `cq`; returns its status.
inline ibv_wc_status one_sided(QueuePair& qp, const CompletionQueue& cq, ibv_wr_opcode opcode,
                               const LocalBuffer& local, const RemoteBuffer& remote) {
  ibv_sge sge = local.sge();
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote.address();
  wr.wr.rdma.rkey = remote.rkey();
  if (qp.post_send(wr)) return IBV_WC_GENERAL_ERR;
  return LoopbackPair::wait_one(cq).status;
}

}  // namespace rdmakit::testing

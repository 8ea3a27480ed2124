// One data path, measured: 8-byte (or --size) RDMA WRITEs between two connected RC QPs of this
// process with --depth requests outstanding, driven by
//   raw        plain verbs: one ibv_post_send per request, every --depth/4-th signalled (as
//              perftest's cq_mod does), ibv_poll_cq in batches;
//   poll       rdmakit's PollQueuePair: batches posted with one doorbell, selective signalling;
//   coroutine  rdmakit's AsyncQueuePair: --depth coroutines each awaiting one write at a time.
// --op read or fadd (raw mode only) measures 8-byte RDMA READs or fetch-and-adds instead;
// --op send SENDs, each into a receive the peer QP posted just before (one ibv_post_recv per
// message, its completion polled from the peer's CQ, as a receiver does).
// Prints one JSON line: {"mode":..., "depth":..., "ops":..., "seconds":..., "mops":...}.
// bench/rdmakit_vs_raw.py runs the modes side by side and under callgrind.
#include <infiniband/verbs.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rdmakit/async_queue_pair.hpp"
#include "rdmakit/poll_queue_pair.hpp"
#include "rdmakit/poller.hpp"

using namespace rdmakit;
using Clock = std::chrono::steady_clock;

namespace {

struct Setup {
  Context ctx = Context::open();
  ProtectionDomain pd{ctx};
  CompletionQueue cq{ctx, 4096};
  CompletionQueue peer_cq{ctx, 4096};
  QueuePair qp, peer;
  std::vector<std::byte> memory = std::vector<std::byte>(1 << 20);
  MemoryRegion mr = pd.register_memory(memory.data(), memory.size(), Access::all);

  explicit Setup(uint32_t depth) {
    qp = QpBuilder(ctx, pd, cq).send_depth(depth).build();
    peer = QpBuilder(ctx, pd, peer_cq).recv_depth(std::max(depth, 128u)).build();
    qp.connect(peer.address(), {IBV_MTU_4096, 1, 1});
    peer.connect(qp.address(), {IBV_MTU_4096, 1, 1});
  }
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "rdmakit_datapath: %s\n", what);
  std::exit(1);
}

void run_raw(Setup& s, uint32_t depth, uint64_t ops, size_t size, ibv_wr_opcode opcode) {
  const uint32_t signal_every = std::max(1u, depth / 4);
  ibv_sge sge = s.mr.local().first(size).sge();
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  const uint64_t target = s.mr.remote().address() + 65536;
  if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = target;
    wr.wr.atomic.rkey = s.mr.rkey();
    wr.wr.atomic.compare_add = 1;
  } else {
    wr.wr.rdma.remote_addr = target;
    wr.wr.rdma.rkey = s.mr.rkey();
  }
  // Only a WRITE's or a SEND's bytes may travel inline, as many as the QP takes.
  const bool send = opcode == IBV_WR_SEND;
  const unsigned inline_flag =
      (opcode == IBV_WR_RDMA_WRITE || send) && size <= s.qp.caps().inline_size ? IBV_SEND_INLINE
                                                                               : 0;
  ibv_sge landing = s.mr.local().subspan(65536, size).sge();
  ibv_recv_wr receive{};
  receive.sg_list = &landing;
  receive.num_sge = 1;
  std::array<ibv_wc, 32> wcs;
  uint64_t posted = 0, completed = 0, received = 0;
  // Takes the peer's receive completions that are there, each checked.
  auto take_receives = [&] {
    const int r = ibv_poll_cq(s.peer_cq.get(), static_cast<int>(wcs.size()), wcs.data());
    if (r < 0) fail("ibv_poll_cq failed");
    for (int i = 0; i < r; ++i)
      if (wcs[static_cast<size_t>(i)].status != IBV_WC_SUCCESS) fail("receive failed");
    received += static_cast<uint64_t>(r);
  };
  uint32_t outstanding = 0;
  ibv_qp* qp = s.qp.get();
  ibv_cq* cq = s.cq.get();
  while (completed < ops) {
    while (outstanding < depth && posted < ops) {
      ++posted;
      ibv_recv_wr* bad_receive;
      if (send && ibv_post_recv(s.peer.get(), &receive, &bad_receive)) fail("ibv_post_recv failed");
      const bool signal = posted % signal_every == 0 || posted == ops;
      wr.send_flags = inline_flag | (signal ? IBV_SEND_SIGNALED : 0);
      ibv_send_wr* bad;
      if (ibv_post_send(qp, &wr, &bad)) fail("ibv_post_send failed");
      ++outstanding;
    }
    const int n = ibv_poll_cq(cq, static_cast<int>(wcs.size()), wcs.data());
    for (int i = 0; i < n; ++i) {
      if (wcs[static_cast<size_t>(i)].status != IBV_WC_SUCCESS) fail("completion failed");
      // Each signalled completion retires its run of requests.
      const uint64_t covered =
          posted == ops && outstanding < signal_every ? outstanding : signal_every;
      outstanding -= static_cast<uint32_t>(covered);
      completed += covered;
    }
    if (send) take_receives();
  }
  // The receives' completions the last polls did not take.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (send && received < ops && Clock::now() < deadline) take_receives();
  if (send && received != ops) fail("a SEND's receive did not complete");
}

void run_poll(Setup& s, uint32_t depth, uint64_t ops, size_t size) {
  PollQueuePair pq(s.qp, std::max(1u, depth / 4));
  const LocalBuffer local = s.mr.local().first(size);
  const RemoteBuffer remote = s.mr.remote().subspan(65536, size);
  std::array<ibv_wc, 32> wcs;
  uint64_t queued = 0, completed = 0;
  while (completed < ops) {
    while (queued < ops && pq.write(local, remote)) ++queued;
    if (pq.post()) fail("post failed");
    const int n = s.cq.poll(wcs);
    for (int i = 0; i < n; ++i) {
      if (wcs[static_cast<size_t>(i)].status != IBV_WC_SUCCESS) fail("completion failed");
      completed += pq.retire(wcs[static_cast<size_t>(i)]);
    }
  }
}

void run_coroutine(Setup& s, uint32_t depth, uint64_t ops, size_t size) {
  Poller poller(s.cq);
  AsyncQueuePair aq(poller, s.qp);
  const LocalBuffer local = s.mr.local().first(size);
  const RemoteBuffer remote = s.mr.remote().subspan(65536, size);
  uint64_t started = 0, completed = 0;
  bool failed = false;
  auto writer = [&]() -> Task<void> {
    while (started < ops) {
      ++started;
      if (co_await aq.write(local, remote)) failed = true;
      ++completed;
    }
  };
  for (uint32_t i = 0; i < depth; ++i) spawn(writer());
  while (completed < ops) poller.poll();
  if (failed) fail("a write failed");
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "raw";
  uint32_t depth = 1;
  uint64_t ops = 1'000'000;
  size_t size = 8;
  std::string op = "write";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mode")
      mode = argv[i + 1];
    else if (flag == "--depth")
      depth = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    else if (flag == "--ops")
      ops = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--size")
      size = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--op")
      op = argv[i + 1];
    else
      fail(
          "usage: rdmakit_datapath --mode raw|poll|coroutine --depth N --ops N [--size B] "
          "[--op write|read|fadd|send]");
  }
  if (depth == 0 || size == 0 || size > 4096) fail("--depth must be positive, --size 1..4096");
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  if (op == "read")
    opcode = IBV_WR_RDMA_READ;
  else if (op == "fadd")
    opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  else if (op == "send")
    opcode = IBV_WR_SEND;
  else if (op != "write")
    fail("unknown --op");
  if (opcode != IBV_WR_RDMA_WRITE && mode != "raw")
    fail("--op read, fadd and send are raw mode only");
  if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD && size != 8) fail("--op fadd takes 8 bytes");
  Setup setup(depth);
  const auto start = Clock::now();
  if (mode == "raw")
    run_raw(setup, depth, ops, size, opcode);
  else if (mode == "poll")
    run_poll(setup, depth, ops, size);
  else if (mode == "coroutine")
    run_coroutine(setup, depth, ops, size);
  else
    fail("unknown --mode");
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "{\"mode\":\"%s\",\"op\":\"%s\",\"depth\":%u,\"size\":%zu,\"ops\":%llu,\"seconds\":%.6f,"
      "\"mops\":%.4f}\n",
      mode.c_str(), op.c_str(), depth, size, static_cast<unsigned long long>(ops), seconds,
      static_cast<double>(ops) / seconds / 1e6);
  return 0;
}
